"""Settings read from the environment outside ``config.Setting``: a wrong value is an error
naming the variable (nan, inf, "maybe" and "1.5" were taken, or silently replaced by the
default)."""

from __future__ import annotations

import pytest

from dxt_core import http
from dxt_core.errors import ConfigError
from dxt_core.store import s3_write


@pytest.mark.parametrize(
    ("name", "read", "raw"),
    [
        ("DXT_MAX_ANSWER_MB", http.default_max_answer_bytes, "nan"),
        ("DXT_MAX_ANSWER_MB", http.default_max_answer_bytes, "inf"),
        ("DXT_MAX_ANSWER_MB", http.default_max_answer_bytes, "1e-9"),
        ("DXT_MAX_ANSWER_MB", http.default_max_answer_bytes, "-1"),
        ("DXT_REQUEST_DEADLINE_S", http.default_deadline_s, "nan"),
        ("DXT_REQUEST_DEADLINE_S", http.default_deadline_s, "inf"),
        ("DXT_ALLOW_HTTP_REDIRECT", http.default_allow_http_redirect, "maybe"),
        ("DXT_S3_LOCK_LEASE_S", s3_write._lease_s, "nan"),
        ("DXT_S3_LOCK_LEASE_S", s3_write._lease_s, "-1"),
        ("DXT_S3_LOCK_LEASE_S", s3_write._lease_s, "1.5"),
        ("DXT_S3_LOCK_LEASE_S", s3_write._lease_s, "0"),
    ],
)
def test_a_wrong_value_names_the_variable(monkeypatch, name, read, raw):
    monkeypatch.setenv(name, raw)
    with pytest.raises(ConfigError, match=name):
        read()


def test_right_values_and_defaults(monkeypatch):
    for name in ("DXT_MAX_ANSWER_MB", "DXT_REQUEST_DEADLINE_S", "DXT_S3_LOCK_LEASE_S"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("DXT_ALLOW_HTTP_REDIRECT", raising=False)
    assert http.default_max_answer_bytes() == 512 << 20
    assert s3_write._lease_s() == s3_write.LOCK_LEASE_S
    assert http.default_allow_http_redirect() is False
    monkeypatch.setenv("DXT_MAX_ANSWER_MB", "0.5")
    monkeypatch.setenv("DXT_S3_LOCK_LEASE_S", "60")
    monkeypatch.setenv("DXT_ALLOW_HTTP_REDIRECT", "yes")
    assert http.default_max_answer_bytes() == 512 << 10
    assert s3_write._lease_s() == 60
    assert http.default_allow_http_redirect() is True


def test_a_settle_delay_over_a_week_is_refused(monkeypatch):
    """It overflowed the day's end time in the wait task (no maximum)."""
    from dxt_core.backends import dag_settings

    monkeypatch.setenv("DXT_EXAMON_SETTLE_SECONDS", "99999999999999999999")
    with pytest.raises(ConfigError, match=r"DXT_EXAMON_SETTLE_SECONDS=.*at most 604800"):
        dag_settings("examon")
    monkeypatch.setenv("DXT_EXAMON_SETTLE_SECONDS", "604800")
    assert dag_settings("examon")["settle_seconds"] == 604800


@pytest.mark.parametrize("text", ["0001-01-01", "1969-12-31", "9999-12-31"])
def test_days_outside_the_calendar_it_can_cut_are_refused(text):
    """0001-01-01 failed every unit with OverflowError when its zone was applied."""
    from dxt_core.windows import parse_day

    with pytest.raises(ConfigError, match="give a day from 1970-01-02 to 9999-12-30"):
        parse_day(text)


@pytest.mark.parametrize("backend", ["examon", "kwollect", "prometheus", "collectd-es"])
def test_a_simulators_port_out_of_range_is_a_usage_error(backend):
    """It was an OverflowError from bind() (exit 1, a traceback)."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", "simulate", backend, "--port", "99999"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "99999 is not a port: 0 (a free one) to 65535" in run.stderr


@pytest.mark.parametrize("backend", ["examon", "kwollect", "prometheus"])
def test_a_simulators_taken_port_is_one_line_naming_it(backend):
    """The Prometheus simulator's was a traceback (its default 9090 is a real Prometheus's);
    Examon's said it could not serve the jobs API on port 5000 when the main port failed."""
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run(
            [sys.executable, "-m", "dxt_core.cli", "simulate", backend, "--port", str(port)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"dxt-simulate-{backend}: ") and f"on 127.0.0.1:{port})" in line


@pytest.mark.parametrize("endpoint", ["ftp://x", "127.0.0.1:9000", "http://[::1", "http://u:p@h:1"])
def test_a_wrong_s3_endpoint_stops_the_whole_run(monkeypatch, endpoint):
    """Each metric-day failed alone with it (exit 1); it is the environment's, so the run
    stops at the first (exit 2), as a missing credential does."""
    from dxt_core.errors import run_wide
    from dxt_core.store.sigv4 import environment_credentials, environment_endpoint

    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    with pytest.raises(ConfigError, match="AWS_ENDPOINT_URL") as ei:
        environment_endpoint()
        environment_credentials()
    assert run_wide(ei.value)
    assert "u:p" not in str(ei.value)
