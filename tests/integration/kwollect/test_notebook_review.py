"""What a notebook user of :class:`Kwollect` ran into (a review as a researcher in Jupyter),
against the simulator as a separate process: a backup landing on another experiment's, an
empty metric list fetching everything, the EnOSlib ``roles=`` missing from energy and the
metric listing, ``from_job``'s own options, bundle names taken for metric names."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from dxt_core import ConfigError
from dxt_core.backends.kwollect.experiment import Kwollect
from tests.kwollect_sim import KwollectSimProcess

pytestmark = pytest.mark.integration

UTC = dt.UTC
T0 = dt.datetime(2024, 11, 26, 14, 0, tzinfo=UTC)
WATT = "wattmetre_power_watt"


@pytest.fixture(scope="module")
def sim():
    s = KwollectSimProcess()
    yield s
    s.stop()


def experiment(sim, nodes=("nova-1.lyon",), seconds=5, start=T0) -> Kwollect:
    k = Kwollect(list(nodes), api_url=sim.url)
    return k.start(start).stop(start + dt.timedelta(seconds=seconds))


def listed(root: Path) -> dict[str, int]:
    doc = json.loads((root / "manifest.json").read_bytes())
    return {f["file"]: f["rows"] for f in doc["files"]}


def test_a_backup_never_lands_on_another_experiments(sim, tmp_path, monkeypatch):
    """The default directory was one fixed name: a second experiment's backup overwrote the
    first's files and manifest without a word. It is now one directory per window; a
    directory holding another backup is refused, or with replace=True the earlier one is
    kept in .versions/; the same backup again rewrites it."""
    monkeypatch.chdir(tmp_path)
    a = experiment(sim)
    b = experiment(sim, seconds=10, start=T0 + dt.timedelta(hours=1))
    pa, pb = a.backup(metrics=WATT), b.backup(metrics=WATT)
    assert pa.parent == Path("kwollect-backup/20241126T140000Z_20241126T140005Z")
    assert pb.parent == Path("kwollect-backup/20241126T150000Z_20241126T150010Z")
    assert listed(pa.parent) == {f"nova-1.lyon.grid5000.fr/{WATT}.jsonl.gz": 6}
    assert listed(pb.parent) == {f"nova-1.lyon.grid5000.fr/{WATT}.jsonl.gz": 11}
    # the same backup again (a cell run twice): rewritten, the same rows
    assert (
        a.backup(metrics=WATT) == pa
        and listed(pa.parent)[f"nova-1.lyon.grid5000.fr/{WATT}.jsonl.gz"] == 6
    )
    before = (pa.parent / "manifest.json").read_bytes()
    with pytest.raises(ConfigError, match=r"holds another backup: other start.*replace=True"):
        b.backup(pa.parent, metrics=WATT)
    with pytest.raises(ConfigError, match="other nodes"):
        experiment(sim, nodes=("nova-2.lyon",)).backup(pa.parent, metrics=WATT)
    assert (pa.parent / "manifest.json").read_bytes() == before  # refused before any request
    b.backup(pa.parent, metrics=WATT, replace=True)
    assert listed(pa.parent) == {f"nova-1.lyon.grid5000.fr/{WATT}.jsonl.gz": 11}
    (kept,) = (pa.parent / ".versions").iterdir()
    assert (kept / "manifest.json").read_bytes() == before
    assert listed(kept) == {f"nova-1.lyon.grid5000.fr/{WATT}.jsonl.gz": 6}
    assert os.path.getsize(kept / f"nova-1.lyon.grid5000.fr/{WATT}.jsonl.gz") > 0
    # a running experiment backed up again into its directory: the same backup, longer
    recent = dt.datetime.now(UTC) - dt.timedelta(seconds=30)
    running = Kwollect(["nova-1.lyon"], api_url=sim.url).start(recent)
    first = running.backup(tmp_path / "r", metrics=WATT)
    assert running.backup(tmp_path / "r", metrics=WATT) == first
    # a manifest that is not a backup's is not overwritten either
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a Kwollect backup's"):
        a.backup(tmp_path / "other", metrics=WATT)


def test_an_empty_metric_list_is_refused_not_every_metric(sim):
    k = experiment(sim)
    for empty in ([], ()):
        with pytest.raises(ConfigError, match="names no metric"):
            k.get_metrics(empty)
    with pytest.raises(ConfigError, match="must be names"):
        k.get_metrics([1])
    assert list(k.get_metrics(iter([WATT]))) == ["nova-1.lyon.grid5000.fr"]


def test_roles_everywhere_and_from_job_options(sim):
    k = experiment(sim, nodes=("nova-1.lyon", "nova-2.lyon"), seconds=600)
    assert list(k.energy(roles=["nova-2.lyon"])) == ["nova-2.lyon.grid5000.fr"]
    assert k.total_energy(roles=["nova-1.lyon"])["nodes"] == 1
    assert list(k.available_metrics(roles=["nova-1.lyon"])) == ["nova-1.lyon.grid5000.fr"]
    assert list(k.get_available_metrics(roles=["nova-2.lyon"])) == ["nova-2.lyon.grid5000.fr"]
    # max_workers is the instance's, the rest the client's (it was all passed to the client)
    job = Kwollect.from_job("lyon", 1930000, api_url=sim.url, max_workers=1, max_points=5000)
    assert job.max_workers == 1 and job.client.max_points == 5000


def test_a_bundle_name_is_not_a_metric(sim):
    """``prom_default_metrics`` is a catalogue entry naming the exporter metrics, each stored
    as ``prom_<name>``: asking for it gave an empty answer."""
    k = experiment(sim)
    with pytest.raises(ConfigError, match=r"'prom_default_metrics' .a bundle of Prometheus"):
        k.get_metrics("prom_default_metrics")


def test_the_staging_a_killed_backup_left_is_removed_and_said(sim, tmp_path, caplog):
    """A backup killed (SIGKILL, power loss) left ``.staging-*`` with its half-written files;
    the next backup succeeded and left it there, unsaid."""
    import subprocess
    import sys

    from dxt_core.procs import HOST_TAG

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    root = tmp_path / "b"
    dead = root / f".staging-{HOST_TAG}.{gone}.abc123"
    live = root / f".staging-{HOST_TAG}.{os.getppid()}.def456"  # a backup running now
    for d in (dead, live):
        (d / "nova-1.lyon.grid5000.fr").mkdir(parents=True)
        (d / "nova-1.lyon.grid5000.fr" / f"{WATT}.jsonl.gz").write_bytes(b"half")
    with caplog.at_level("WARNING"):
        experiment(sim).backup(root, metrics=WATT)
    assert "removed 1 staging directory that killed backups left" in caplog.text
    assert not dead.exists() and live.exists()


def test_replacing_a_directory_whose_manifest_is_not_a_backups_keeps_every_file(sim, tmp_path):
    """With replace=True over a manifest that cannot be read (or another tool's), only the
    manifest was kept: the files of the same names were overwritten, none kept."""
    root = tmp_path / "other"
    node = root / "nova-1.lyon.grid5000.fr"
    node.mkdir(parents=True)
    (root / "manifest.json").write_text("{not json")
    (node / f"{WATT}.jsonl.gz").write_bytes(b"someone else's")
    experiment(sim).backup(root, metrics=WATT, replace=True)
    (kept,) = (root / ".versions").iterdir()
    assert (kept / "manifest.json").read_text() == "{not json"
    assert (kept / "nova-1.lyon.grid5000.fr" / f"{WATT}.jsonl.gz").read_bytes() == b"someone else's"
    assert listed(root) == {f"nova-1.lyon.grid5000.fr/{WATT}.jsonl.gz": 6}
