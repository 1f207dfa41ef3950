"""``dxt publish <backend>`` from the registry: which backends publish, the error for one that
does not (one declared by the test without a publish role), and each
role's units and layout on a hand-made archive tree."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest

from dxt_core.backends import backends, get_publisher, publishers
from dxt_core.errors import ConfigError
from dxt_core.publish.archive_scan import UnitMonth
from dxt_core.publish.tree import LocalTree, open_tree


def test_the_publishing_backends_are_those_declaring_the_role():
    names = [b.name for b in publishers()]
    assert names == ["examon", "kwollect", "collectd_es", "prometheus"]
    assert names == [b.name for b in backends() if b.publish is not None]


def test_unknown_backend_names_those_that_publish():
    with pytest.raises(ConfigError, match="unknown backend 'nope': backends that publish: ex"):
        get_publisher("nope")


def test_a_backend_without_the_role_does_not_publish(tmp_path, monkeypatch):
    # a backend of this test's own, declared without a publish role
    pkg = tmp_path / "quiet_backend"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from dxt_core.backends import Backend\n"
        "BACKEND = Backend(name='quiet', title='declares no publish role', "
        "package='quiet_backend')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DXT_EXTRA_BACKENDS", "quiet_backend")
    assert "quiet" not in [b.name for b in publishers()]
    with pytest.raises(
        ConfigError,
        match=r"backend 'quiet' does not publish .*backends that publish: examon, kwollect, "
        r"collectd-es, prometheus",
    ):
        get_publisher("quiet")


def test_cli_refuses_an_unknown_backend(tmp_path):
    out = subprocess.run(
        [
            *(sys.executable, "-m", "dxt_core.cli", "publish", "nope"),
            *("--archive", str(tmp_path), "--out", str(tmp_path / "o")),
            *("--from-month", "2020-03", "--to-month", "2020-03"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "unknown backend 'nope': backends that publish: examon, kwollect" in out.stderr
    assert not (tmp_path / "o").exists()


def test_an_archive_or_output_url_of_another_scheme_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="unknown scheme gs://"):
        open_tree("gs://bucket/x")
    from dxt_core.publish.output import open_out

    with pytest.raises(ConfigError, match=r"--out gs://b/x: .*unknown scheme gs://") as err:
        open_out("gs://b/x")
    assert "archive root" not in str(err.value)  # the output is not an archive root
    assert "the output 'gs://b/x': unknown scheme" in str(err.value)
    assert not (tmp_path / "gs:").exists()


def test_examon_role_layout_and_units(tmp_path):
    role = get_publisher("kairosdb").publish_role()  # an alias finds it too
    assert role.backend == "examon" and role.keys == ("plugin", "metric")
    tree = LocalTree(tmp_path)
    with pytest.raises(ConfigError, match="holds no examon archive"):
        role.units(tree)
    (tmp_path / "examon/ipmi_pub/ambient").mkdir(parents=True)
    (tmp_path / "examon/plugin=job_table/metric=job_info_marconi100").mkdir(parents=True)
    units = role.units(tree)
    assert units == [("ipmi_pub", "ambient"), ("job_table", "job_info_marconi100")]
    jobs = role.scan(tree, ("job_table", "job_info_marconi100"), 2020, 3)
    metric = role.scan(tree, ("ipmi_pub", "ambient"), 2020, 3)
    assert jobs.job_table and not metric.job_table
    assert metric.missing[0] == dt.date(2020, 3, 1) and len(metric.missing) == 31
    assert role.data_path(UnitMonth(("ipmi_pub", "ambient"), 2020, 3)) == (
        "year_month=20-03/plugin=ipmi_pub/metric=ambient/a_0.parquet"
    )


def test_folders_no_unit_can_have_are_left_out_and_reported(tmp_path):
    """An older version archived plugins and metrics whose names hold '=' (refused since
    2026-12-06): publish passes them over and says so, naming each folder."""
    from dxt_core.publish.dataset import PublishReport

    role = get_publisher("examon").publish_role()
    tree = LocalTree(tmp_path)
    (tmp_path / "examon/ipmi_pub/ambient").mkdir(parents=True)
    (tmp_path / "examon/a=b/ambient").mkdir(parents=True)
    (tmp_path / "examon/ipmi_pub/x=y").mkdir(parents=True)
    (tmp_path / "examon/plugin=p/metric=m").mkdir(parents=True)
    assert role.units(tree) == [("ipmi_pub", "ambient"), ("p", "m")]
    assert tree.left_out == ["examon/a=b", "examon/ipmi_pub/x=y"]
    report = PublishReport("out", [(2020, 3)], left_out=tree.left_out)
    (said,) = report.operator_warnings()
    assert said.startswith("left out 2 folders of the archive") and "examon/a=b, " in said
    report.skipped = [f"skipped u {d}: bad" for d in range(3)]
    said = report.operator_warnings(most=2)
    assert said[:2] == ["skipped u 0: bad", "skipped u 1: bad"]
    assert said[2].startswith("... and 1 more unit-days skipped (3 in all")


@pytest.mark.parametrize(
    ("name", "dirs", "unit", "path"),
    [
        (
            "kwollect",
            ["kwollect/nancy/bmc_node_power_watt"],
            ("nancy", "bmc_node_power_watt"),
            "year_month=24-11/site=nancy/metric=bmc_node_power_watt/a_0.parquet",
        ),
        (
            "collectd_es",
            ["collectd_es/disk"],
            ("disk",),
            "year_month=24-11/family=disk/a_0.parquet",
        ),
        (
            "prometheus",
            ["prometheus/node_temp_celsius"],
            ("node_temp_celsius",),
            "year_month=24-11/metric=node_temp_celsius/a_0.parquet",
        ),
    ],
)
def test_the_other_roles_units_and_paths(tmp_path, name, dirs, unit, path):
    role = get_publisher(name).publish_role()
    tree = LocalTree(tmp_path)
    with pytest.raises(ConfigError, match=f"holds no {name} archive"):
        role.units(tree)
    for d in dirs:
        (tmp_path / d).mkdir(parents=True)
    assert role.units(tree) == [unit]
    assert role.data_path(UnitMonth(unit, 2024, 11)) == path


def test_collectd_publishes_the_json_lines_file_of_a_day(tmp_path):
    """A day archived as JSON Lines and HDF5 is published from the raw hits; one archived
    as HDF5 only is skipped, saying why."""
    role = get_publisher("collectd-es").publish_role()
    d = tmp_path / "collectd_es/disk"
    d.mkdir(parents=True)
    for day, files in (("2024-11-01", ["jsonl.gz", "hdf5"]), ("2024-11-02", ["hdf5"])):
        entries = []
        for ext in files:
            (d / f"{day}.{ext}").write_bytes(b"x")
            sha = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
            entries.append({"file": f"{day}.{ext}", "bytes": 1, "sha256": sha})
        doc = {"status": "archived", "files": entries, "rows": 1}
        (d / f"{day}.manifest.json").write_text(json.dumps(doc))
    um = role.scan(LocalTree(tmp_path), ("disk",), 2024, 11)
    assert [x.rel for x in um.days] == ["collectd_es/disk/2024-11-01.jsonl.gz"]
    assert um.skipped[0][0] == dt.date(2024, 11, 2)
    assert "names no data file this backend publishes" in um.skipped[0][1]
