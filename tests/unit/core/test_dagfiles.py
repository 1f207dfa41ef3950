"""``dxt dags write``: the DAG files of an installed package (a wheel has no ``dags/``)."""

from __future__ import annotations

import subprocess
import sys

from dxt_core.dagfiles import dag_files, default_folder
from tests.conftest import ROOT

DXT = [sys.executable, "-m", "dxt_core.cli"]


def dxt(*args, **kw):
    return subprocess.run([*DXT, *args], capture_output=True, text=True, timeout=60, **kw)


def test_the_checkouts_dag_files_are_the_ones_written():
    files = dag_files()
    assert sorted(files) == sorted(p.name for p in (ROOT / "dags").glob("*.py"))
    for name, text in files.items():
        assert (ROOT / "dags" / name).read_text() == text, f"dags/{name}: dxt dags write --to dags"


def test_write_then_unchanged_then_a_changed_file_is_kept_or_replaced_with_a_copy(tmp_path):
    folder = tmp_path / "dags"
    first = dxt("dags", "write", "--to", str(folder))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "5 written, 0 replaced, 0 unchanged, 0 kept as they were" in first.stdout
    again = dxt("dags", "write", "--to", str(folder))
    assert again.returncode == 0 and "0 written, 0 replaced, 5 unchanged" in again.stdout
    mine = folder / "dxt_examon.py"
    mine.write_text(mine.read_text() + "# my change\n")
    kept = dxt("dags", "write", "--to", str(folder))
    assert kept.returncode == 1, kept.stdout
    assert f"KEPT {mine}: it differs from this version's; --force replaces it" in kept.stdout
    assert mine.read_text().endswith("# my change\n")
    forced = dxt("dags", "write", "--to", str(folder), "--force")
    assert forced.returncode == 0 and "1 replaced, 4 unchanged" in forced.stdout
    assert mine.read_text() == dag_files()["dxt_examon.py"]
    assert (folder / "dxt_examon.py.bak").read_text().endswith("# my change\n")


def test_the_default_folder_is_airflows_and_a_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW__CORE__DAGS_FOLDER", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    assert default_folder() == tmp_path / "home" / "dags"
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "elsewhere"))
    assert default_folder() == tmp_path / "elsewhere"
    f = tmp_path / "file"
    f.write_text("x")
    bad = dxt("dags", "write", "--to", str(f))
    assert bad.returncode == 2 and f"{f} is not a directory" in bad.stderr, bad.stderr


def test_an_installed_package_writes_its_dag_files_for_the_demo(tmp_path):
    """The demo from an installed package (no checkout around it) runs the DAG files it
    writes into its own folder: it stopped with "run 'dxt demo' from the checkout"."""
    import shutil

    site = tmp_path / "site"
    shutil.copytree(
        ROOT / "dxt_core", site / "dxt_core", ignore=shutil.ignore_patterns("__pycache__")
    )
    run = subprocess.run(
        [sys.executable, "-c", "from pathlib import Path; from dxt_core.demo import dags_folder; "
         "print(dags_folder(Path('home')))"],
        capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(site)}, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    folder = tmp_path / run.stdout.strip()
    assert folder == tmp_path / "home/dags"
    assert sorted(p.name for p in folder.iterdir()) == sorted(dag_files())
