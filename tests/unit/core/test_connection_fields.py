"""Connection fields -> base URLs: one rule for all three backends."""

from __future__ import annotations

import pytest

from dxt_core.backends.collectd_es.source import connection_from_fields as es_connection_from_fields
from dxt_core.backends.examon.connection import examon_connection_from_fields
from dxt_core.backends.kwollect.connection import kwollect_connection_from_fields
from dxt_core.config import check_extras, url_from_host
from dxt_core.errors import ConfigError


@pytest.mark.parametrize(
    ("host", "port", "scheme", "url"),
    [
        ("examon.example.org", 8083, "http", "http://examon.example.org:8083"),
        ("examon.example.org", None, "https", "https://examon.example.org"),
        ("https://g.example.org/sub/", 443, "http", "https://g.example.org:443/sub"),
        ("http://h:9200", 9999, "http", "http://h:9200"),  # a URL's own port wins
        # host:port without a scheme: its own port too (the default was added after it,
        # and the error named a port never given)
        ("127.0.0.1:45143", 9090, "http", "http://127.0.0.1:45143"),
        ("[::1]:45143", 9090, "http", "http://[::1]:45143"),
        ("[::1]", 9090, "http", "http://[::1]:9090"),
    ],
)
def test_url_from_host(host, port, scheme, url):
    assert url_from_host(host, port, scheme) == url


def test_unknown_extras_are_named_for_every_backend():
    with pytest.raises(ConfigError, match=r"'c'.*unknown extra.*\['bogus'\].*known"):
        check_extras("c", {"bogus": 1, "a": 2}, {"a"})
    fields = {"host": "h", "port": 1, "schema": None, "login": None, "password": None}
    for build in (
        examon_connection_from_fields,
        kwollect_connection_from_fields,
        es_connection_from_fields,
    ):
        with pytest.raises(ConfigError, match=r"unknown extra.*typo"):
            build(conn_id="c", extra={"typo": 1}, **fields)


def test_each_backend_builds_its_url():
    kw = {"login": None, "password": None, "extra": None}
    assert examon_connection_from_fields(
        conn_id="e", host="h", port=8083, schema=None, **kw
    ).url == ("http://h:8083")
    k = kwollect_connection_from_fields(
        conn_id="k", host="api.g5k", port=None, schema="stable", **kw
    )
    assert k.api_url == "https://api.g5k/stable"
    es = es_connection_from_fields(conn_id="s", host="es", port=None, schema="https", **kw)
    assert es.url == "https://es:9200"
    es = es_connection_from_fields(
        conn_id="s", host="http://es.example.org", port=9201, schema=None, **kw
    )
    assert es.url == "http://es.example.org:9201"
    with pytest.raises(ConfigError, match="verify_certs"):
        es_connection_from_fields(
            conn_id="s",
            host="es",
            port=None,
            schema=None,
            login=None,
            password=None,
            extra={"verify_certs": "perhaps"},
        )


def test_a_printed_refetch_command_keeps_the_options_but_never_a_password():
    """``dxt coverage --reconcile`` prints the command that refetches a grown day: the
    connection's options as given, the URL without its credentials, no password."""
    import argparse

    from dxt_core.backends.examon.cli import refetch_command as examon_refetch
    from dxt_core.backends.prometheus.connection import SPEC as PROMETHEUS

    parser = argparse.ArgumentParser()
    PROMETHEUS.add_cli_arguments(parser)
    args = parser.parse_args(
        [
            *("--url", "https://alice:S3cret/PW@prom.example.org:9090/"),
            *("--user", "alice", "--password", "S3cretPW", "--auth", "bearer"),
            *("--tz", "UTC", "--timeout", "30"),
        ]
    )
    words = PROMETHEUS.cli_words(args, skip=("time_zone",))
    assert words == [
        *("--url", "https://prom.example.org:9090/", "--user", "alice"),
        *("--auth", "bearer", "--timeout", "30.0"),
    ]
    ns = argparse.Namespace(
        url="http://bob:hunter2@examon:8083",
        user=None,
        password="hunter2",
        conn_grafana_proxy=True,
        conn_time_zone="UTC",
        conn_cluster=None,
        archive="/a",
        format="csv",
    )
    line = examon_refetch(ns, ("ipmi_pub", "ambient"), "2024-05-01", "2024-05-02")
    assert "hunter2" not in line and "bob" not in line
    assert line.startswith("dxt extract examon --url http://examon:8083 --grafana-proxy --tz UTC")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--timeout", "-5"], "(--timeout on the command line) must be above 0, not -5.0"),
        (["--timeout", "0"], "must be above 0"),
        (["--window-s", "100"], "--window-s 100 is below --min-window-s 300"),
        (["--window-s", "100000"], "the first (100000 s, --window-s) must be from the smallest"),
        (["--min-window-s", "0", "--window-s", "0"], "--min-window-s 0: give 1 second or more"),
        (["--target-points", "0"], "--target-points 0: give 1 or more"),
        (["--retries", "-1"], "--retries -1: give 0 (no retry) or more"),
    ],
)
def test_bad_numbers_name_the_option_and_write_nothing(tmp_path, argv, message):
    import subprocess
    import sys

    out = subprocess.run(
        [
            *(sys.executable, "-m", "dxt_core.cli", "extract", "prometheus"),
            *("--url", "http://127.0.0.1:9", "--start-day", "2024-03-30"),
            *("--archive", str(tmp_path / "a"), *argv),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "a").exists()


def test_an_empty_option_given_is_refused(tmp_path):
    import subprocess
    import sys

    for backend in ("examon", "prometheus"):
        run = subprocess.run(
            [sys.executable, "-m", "dxt_core.cli", "extract", backend, "--url", "http://h:1",
             "--tz", "", "--archive", str(tmp_path), "--start-day", "2024-05-01"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert run.returncode == 2, run.stderr
        assert "--tz is empty: give a value, or leave it out" in run.stderr


@pytest.mark.parametrize("url", ["http://h:1/?token=s3cret", "http://h:1/prom#frag"])
def test_a_url_with_a_query_or_fragment_is_refused(url):
    """The client asks its own paths below the base URL: the query was dropped in silence
    (and a token in it written into every manifest's source_url)."""
    from dxt_core.backends.prometheus.connection import SPEC

    with pytest.raises(ConfigError, match=r"has a query \(\?\.\.\.\) or fragment") as ei:
        SPEC.from_fields(conn_id="c", host=url)
    assert "s3cret" not in str(ei.value)


@pytest.mark.parametrize(
    "url", ["http://alice:pw/with#odd@chars@127.0.0.1:9", "http://u:pa?ss@127.0.0.1:9"]
)
def test_a_password_holding_a_question_mark_or_hash_is_not_a_query(url):
    """docs/faults.md: a URL password may hold an unencoded /, #, ? or @ (the query check
    refused them for a while)."""
    from dxt_core.backends.examon.connection import SPEC

    conn = SPEC.from_fields(conn_id="c", host=url)
    assert conn.safe_url == "http://127.0.0.1:9"


def test_kwollect_and_elasticsearch_urls_with_a_query_are_refused_too():
    from dxt_core.backends.collectd_es.connection import CollectdEsConnection
    from dxt_core.backends.kwollect.source import KwollectClient

    with pytest.raises(ConfigError, match=r"the Kwollect API URL .* has a query"):
        KwollectClient("http://127.0.0.1:1?token=SECRET")
    with pytest.raises(ConfigError, match=r"the Elasticsearch URL .* has a query"):
        CollectdEsConnection(url="http://127.0.0.1:9?x=1")
