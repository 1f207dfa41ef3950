"""``dxt publish <backend>`` from the registry: which backends publish, the errors for those
that do not, and Examon's role (layout and units) on a hand-made archive tree."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest

from dxt_core.backends import backends, get_publisher, publishers
from dxt_core.errors import ConfigError
from dxt_core.publish.archive_scan import UnitMonth


def test_the_publishing_backends_are_those_declaring_the_role():
    names = [b.name for b in publishers()]
    assert "examon" in names
    assert names == [b.name for b in backends() if b.publish is not None]
    for b in backends():
        if b.publish is None:
            with pytest.raises(ConfigError, match=r"does not publish.*backends that publish: "):
                get_publisher(b.command)


def test_unknown_backend_names_those_that_publish():
    with pytest.raises(ConfigError, match="unknown backend 'nope': backends that publish: ex"):
        get_publisher("nope")


def test_cli_refuses_a_backend_that_does_not_publish(tmp_path):
    silent = [b.command for b in backends() if b.publish is None]
    if not silent:
        pytest.skip("every backend publishes")
    out = subprocess.run(
        [
            *(sys.executable, "-m", "dxt_core.cli", "publish", silent[0]),
            *("--archive", str(tmp_path), "--out", str(tmp_path / "o")),
            *("--from-month", "2020-03", "--to-month", "2020-03"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert f"backend {silent[0]!r} does not publish" in out.stderr
    assert not (tmp_path / "o").exists()


def test_examon_role_layout_and_units(tmp_path):
    role = get_publisher("kairosdb").publish_role()  # an alias finds it too
    assert role.backend == "examon"
    with pytest.raises(ConfigError, match="holds no examon archive"):
        role.units(tmp_path)
    (tmp_path / "examon/ipmi_pub/ambient").mkdir(parents=True)
    (tmp_path / "examon/plugin=job_table/metric=job_info_marconi100").mkdir(parents=True)
    units = role.units(tmp_path)
    assert units == [("ipmi_pub", "ambient"), ("job_table", "job_info_marconi100")]
    jobs = role.scan(tmp_path, "job_table", "job_info_marconi100", 2020, 3)
    metric = role.scan(tmp_path, "ipmi_pub", "ambient", 2020, 3)
    assert jobs.job_table and not metric.job_table
    assert metric.missing[0] == dt.date(2020, 3, 1) and len(metric.missing) == 31
    assert role.data_path(UnitMonth("ipmi_pub", "ambient", 2020, 3)) == (
        "year_month=20-03/plugin=ipmi_pub/metric=ambient/a_0.parquet"
    )
