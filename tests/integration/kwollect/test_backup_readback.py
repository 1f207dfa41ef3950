"""A backup read back (dxt_core.backends.kwollect.readback): the frame get_metrics_pandas gave,
from the files on disk, checked against the manifest; an interrupted backup is refused unless
asked for. Backups are made from the simulator, a separate process, over real HTTP."""

from __future__ import annotations

import datetime as dt
import gzip
import json

import pandas as pd
import pytest

from dxt_core.backends.kwollect.experiment import Kwollect
from dxt_core.backends.kwollect.readback import read_backup
from dxt_core.errors import ArchiveError, ConfigError
from tests.kwollect_sim import KwollectSimProcess

pytestmark = pytest.mark.integration

T0 = dt.datetime(2024, 11, 26, 14, 0, tzinfo=dt.UTC)
NODES = ["nova-1.lyon", "gros-1.nancy", "nova-2.lyon"]
KEY = ["node", "timestamp", "metric_id"]


@pytest.fixture(scope="module")
def sim():
    s = KwollectSimProcess()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def experiment(sim, tmp_path_factory):
    """One experiment's live frame, and its backups in both formats."""
    k = Kwollect(NODES, api_url=sim.url)
    k.start(T0).stop(T0 + dt.timedelta(minutes=5))
    root = tmp_path_factory.mktemp("backups")
    return k.get_metrics_pandas(), k.backup(root / "jsonl"), k.backup(root / "csv", format="csv")


def sort(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(KEY, kind="stable").reset_index(drop=True)


def test_a_backup_reads_back_as_the_frame_get_metrics_pandas_gave(experiment):
    live, jsonl, _ = experiment
    back = read_backup(jsonl.parent)
    assert len(back) == len(live) > 0
    assert list(back.dtypes.astype(str)) == list(live.dtypes.astype(str))
    pd.testing.assert_frame_equal(sort(back), sort(live))
    # nodes in the experiment's order, each node's points oldest first
    assert list(back["node"].unique()) == list(live["node"].unique())
    for _, points in back.groupby("node", sort=False):
        assert points["timestamp"].is_monotonic_increasing
    pd.testing.assert_frame_equal(read_backup(jsonl), back)  # the manifest's path too


def test_a_csv_backup_reads_back_with_its_labels_as_text(experiment):
    live, _, csv_manifest = experiment
    back = sort(read_backup(csv_manifest.parent))
    live = sort(live)
    pd.testing.assert_frame_equal(back.drop(columns="labels"), live.drop(columns="labels"))
    as_text = [
        {k: ";".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in d.items()}
        for d in live["labels"]
    ]
    assert list(back["labels"]) == as_text


def test_metrics_and_nodes_choose_among_what_the_backup_holds(experiment):
    live, jsonl, _ = experiment
    watts = read_backup(
        jsonl.parent, metrics="wattmetre_power_watt", nodes=["nova-1.lyon.grid5000.fr"]
    )
    expected = live[
        (live["metric_id"] == "wattmetre_power_watt") & (live["node"] == "nova-1.lyon.grid5000.fr")
    ]
    assert len(watts) == len(expected) > 0
    pd.testing.assert_frame_equal(sort(watts), sort(expected))
    with pytest.raises(
        ConfigError, match=r"holds no metric 'wattmetre_power_wat'; it holds .*wattmetre_power_watt"
    ):
        read_backup(jsonl.parent, metrics=["wattmetre_power_wat"])
    # nodes as the experiment takes them: the short form, an EnOSlib host
    host = type("Host", (), {"address": "nova-1.lyon.grid5000.fr"})()
    for nodes in (["nova-1.lyon"], [host]):
        pd.testing.assert_frame_equal(
            read_backup(jsonl.parent, metrics=["wattmetre_power_watt"], nodes=nodes), watts
        )
    with pytest.raises(
        ConfigError, match=r"holds no node 'nova-3.lyon.grid5000.fr'; it holds gros-1"
    ):
        read_backup(jsonl.parent, nodes=["nova-3.lyon"])


def test_an_interrupted_backup_is_refused_unless_asked_for(experiment, tmp_path):
    """A backup stopped by Ctrl-C lists its complete sites only (test_backup_interrupt.py
    makes one): read as if whole, an analysis would miss a site without a word."""
    _, jsonl, _ = experiment
    doc = json.loads(jsonl.read_text())
    lyon = [f for f in doc["files"] if f["site"] == "lyon"]
    cut = {
        **doc,
        "complete": False,
        "files": lyon,
        "interrupted": {
            "reason": "interrupted",
            "sites_complete": ["lyon"],
            "sites_not_backed_up": {"nancy": "stopped"},
            "nodes_not_backed_up": ["gros-1.nancy.grid5000.fr"],
        },
    }
    for f in lyon:
        (tmp_path / f["file"]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f["file"]).write_bytes((jsonl.parent / f["file"]).read_bytes())
    (tmp_path / "manifest.json").write_text(json.dumps(cut))
    with pytest.raises(ConfigError) as err:
        read_backup(tmp_path)
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path / 'manifest.json'}: the backup is incomplete"), msg
    assert "not backed up: nancy (stopped), 1 node(s)" in msg and "allow_incomplete=True" in msg
    part = read_backup(tmp_path, allow_incomplete=True)
    assert set(part["node"]) == {"nova-1.lyon.grid5000.fr", "nova-2.lyon.grid5000.fr"}


def test_a_changed_or_missing_file_and_a_missing_manifest_are_named(experiment, tmp_path):
    _, jsonl, _ = experiment
    doc = json.loads(jsonl.read_text())
    for f in doc["files"]:
        (tmp_path / f["file"]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f["file"]).write_bytes((jsonl.parent / f["file"]).read_bytes())
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    first = tmp_path / doc["files"][0]["file"]
    lines = gzip.decompress(first.read_bytes()).splitlines(keepends=True)
    first.write_bytes(gzip.compress(b"".join(lines[:-1])))  # a point less
    with pytest.raises(ArchiveError, match=rf"{first}: not the bytes manifest.json lists"):
        read_backup(tmp_path)
    doc["files"][0].update(sha256=__import__("hashlib").sha256(first.read_bytes()).hexdigest())
    (tmp_path / "manifest.json").write_text(json.dumps(doc))  # the bytes listed, not the rows
    with pytest.raises(
        ArchiveError, match=rf"{first}: {len(lines) - 1:,} points, manifest.json lists {len(lines)}"
    ):
        read_backup(tmp_path)
    first.unlink()
    with pytest.raises(ArchiveError, match=rf"{first}: listed in manifest.json but missing"):
        read_backup(tmp_path)
    with pytest.raises(ConfigError, match=r"no backup manifest there"):
        read_backup(tmp_path / "elsewhere")
    (tmp_path / "manifest.json").write_text('{"schema": "something/else"}')
    with pytest.raises(
        ConfigError, match=r"not a dxt Kwollect backup manifest \(schema 'something/else'"
    ):
        read_backup(tmp_path)
    (tmp_path / "manifest.json").write_text('{"schema":\n')
    with pytest.raises(ConfigError, match=r"manifest.json \(line 2\): not JSON"):
        read_backup(tmp_path)


def test_a_node_or_metric_the_backup_was_of_without_points_reads_empty(sim, tmp_path):
    """The backup of three nodes of which one has PDU points: the two others were refused
    as "the backup holds no node" (the files only were looked at, not what it was of)."""
    k = Kwollect(["nova-1.lyon", "nova-2.lyon", "taurus-1.lyon"], api_url=sim.url)
    k.start(T0).stop(T0 + dt.timedelta(minutes=5))
    manifest = k.backup(tmp_path / "b", metrics="pdu_outlet_power_watt")
    held = {f["node"] for f in json.loads(manifest.read_text())["files"]}
    assert "nova-1.lyon.grid5000.fr" not in held  # the case: a node without points
    back = read_backup(manifest, nodes=["nova-1.lyon"])
    live = k.get_metrics_pandas(metrics="pdu_outlet_power_watt", nodes=["nova-1.lyon"])
    assert len(back) == len(live) == 0
    assert list(back.dtypes.astype(str)) == list(live.dtypes.astype(str))


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"files": "abc"}, "files is not a list"),
        ({"files": 5}, "files is not a list"),
        ({"nodes": 5}, "nodes is not a list of node names"),
        ({"format": "xml"}, "format 'xml' is neither 'jsonl' nor 'csv'"),
        ({"metrics": "wattmetre_power_watt"}, "metrics is neither null"),
        ({"files[0]": {"node": None}}, r"files\[0\].node is None, not a str"),
        ({"files[0]": {"rows": "120"}}, r"files\[0\].rows is '120', not a int"),
        ({"files[0]": {"rows": True}}, r"files\[0\].rows is True, not a int"),
        ({"files[1]": {"file": "FIRST"}}, r"files\[1\] lists .* again"),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_named_not_a_traceback(experiment, tmp_path, change, said):
    """Fields of the wrong type gave a TypeError, a KeyError, an empty frame or "120
    points, manifest.json lists 120"."""
    _, jsonl, _ = experiment
    doc = json.loads(jsonl.read_text())
    for key, value in change.items():
        if key.startswith("files["):
            entry = doc["files"][int(key[6])]
            entry.update(
                {k: doc["files"][0]["file"] if v == "FIRST" else v for k, v in value.items()}
            )
        else:
            doc[key] = value
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=rf"manifest.json: {said}"):
        read_backup(tmp_path)


def test_listed_bytes_that_are_not_points_are_named(experiment, tmp_path):
    """A manifest rewritten over other bytes (the sha256 matches): the gzip or JSON error
    came bare, naming no file."""
    import hashlib

    _, jsonl, _ = experiment
    doc = json.loads(jsonl.read_text())
    entry = doc["files"][0]
    (tmp_path / entry["file"]).parent.mkdir(parents=True)
    for raw in (b"not gzip", gzip.compress(b"{not json\n")):
        (tmp_path / entry["file"]).write_bytes(raw)
        entry["sha256"] = hashlib.sha256(raw).hexdigest()
        doc["files"] = [entry]
        (tmp_path / "manifest.json").write_text(json.dumps(doc))
        with pytest.raises(ArchiveError, match=rf"{tmp_path / entry['file']}: not jsonl points"):
            read_backup(tmp_path)
