"""``dxt dags write``: the DAG files of an installed package (a wheel has no ``dags/``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dxt_core.dagfiles import airflow_dags_folder, dag_files, default_folder
from dxt_core.errors import ConfigError
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
    # the diagnostic on stderr (as extract's FAILED lines), the summary on stdout
    assert f"KEPT {mine}: it differs from this version's; --force replaces it" in kept.stderr
    assert "KEPT" not in kept.stdout and "1 kept as they were" in kept.stdout, kept.stdout
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


def _airflow_env(monkeypatch, home, config=None):
    for name in ("AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    if config is not None:
        monkeypatch.setenv("AIRFLOW_CONFIG", str(config))


def test_airflow_cfg_sets_the_folder_after_the_environment_and_before_the_default(
    tmp_path, monkeypatch
):
    home = tmp_path / "h"
    home.mkdir()
    _airflow_env(monkeypatch, home)
    cfg = home / "airflow.cfg"
    cfg.write_text("[core]\ndags_folder = $AIRFLOW_HOME/mydags\n[other]\ndags_folder = no\n")
    assert airflow_dags_folder() == (home / "mydags", f"from [core] dags_folder in {cfg}")
    # AIRFLOW_CONFIG names another file; without one (or its option) the default
    other = tmp_path / "other.cfg"
    other.write_text("[core]\nload_examples = False\n")
    monkeypatch.setenv("AIRFLOW_CONFIG", str(other))
    folder, why = airflow_dags_folder()
    assert folder == home / "dags" and why.startswith("the default, $AIRFLOW_HOME/dags"), why
    other.write_text("[core]\ndags_folder = ~/theirs\n")
    assert airflow_dags_folder()[0] == Path("~/theirs").expanduser()
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", "$AIRFLOW_HOME/from-env")
    assert airflow_dags_folder() == (home / "from-env", "from AIRFLOW__CORE__DAGS_FOLDER")


def test_dags_write_goes_where_airflow_cfg_says_and_says_why(tmp_path):
    home = tmp_path / "h"
    home.mkdir()
    (home / "airflow.cfg").write_text(f"[core]\ndags_folder = {home}/mydags\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    out = dxt("dags", "write", env={**env, "AIRFLOW_HOME": str(home)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[0] == (
        f"DAG folder {home}/mydags (from [core] dags_folder in {home}/airflow.cfg)"
    )
    assert sorted(p.name for p in (home / "mydags").iterdir()) == sorted(dag_files())
    assert not (home / "dags").exists()


@pytest.mark.slow  # 3-6 s on 2 cores (the fast tier's limit is 3 s)
def test_the_folder_is_the_one_airflow_itself_reads(tmp_path):
    pytest.importorskip("airflow")
    home = tmp_path / "h"
    home.mkdir()
    cfg = tmp_path / "conf" / "my.cfg"
    cfg.parent.mkdir()
    cfg.write_text("[core]\ndags_folder = $AIRFLOW_HOME/%%(x)s/mydags\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"AIRFLOW_HOME": str(home), "AIRFLOW_CONFIG": str(cfg)}
    theirs = subprocess.run(
        [sys.executable, "-c", "from airflow import settings; print(settings.DAGS_FOLDER)"],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert theirs.returncode == 0, theirs.stderr[-2000:]
    ours = subprocess.run(
        [sys.executable, "-c", "from dxt_core.dagfiles import default_folder; "
         "print(default_folder())"],
        capture_output=True, text=True, timeout=60, env={**env, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == theirs.stdout == f"{home}/%(x)s/mydags\n"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[core]\ndags_folder = {AIRFLOW_HOME}/dags\n", "does not replace {AIRFLOW_HOME}"),
        ("dags_folder = /x\n", "cannot read Airflow's config file .*: File contains no section"),
        ("[core]\ndags_folder = %(nope)s/x\n", "cannot read Airflow's config file .*: Bad value"),
    ],
)
def test_an_airflow_cfg_that_cannot_give_the_folder_is_refused_naming_it(
    tmp_path, monkeypatch, text, match
):
    _airflow_env(monkeypatch, tmp_path)
    (tmp_path / "airflow.cfg").write_text(text)
    with pytest.raises(ConfigError, match=match) as err:
        airflow_dags_folder()
    assert str(tmp_path / "airflow.cfg") in str(err.value) and "--to" in str(err.value)


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
