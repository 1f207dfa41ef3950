"""Errors of the command's surroundings said in one line (they were tracebacks): a wrong
``DXT_EXTRA_BACKENDS``, a folder the command may not read, plugin options that are not
UTF-8."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

DXT = [sys.executable, "-m", "dxt_core.cli"]


def dxt(*args, env=None, prefix=()):
    return subprocess.run(
        [*prefix, *DXT, *args], capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


#: As root, the command runs without the capabilities that pass over file modes.
NO_OVERRIDE = (
    ("setpriv", "--bounding-set=-dac_override,-dac_read_search",
     "--inh-caps=-dac_override,-dac_read_search")
    if os.geteuid() == 0 else ()
)  # fmt: skip


def test_a_wrong_extra_backend_is_one_line_for_every_command():
    for argv in (["--version"], ["coverage", "--help"]):
        run = dxt(*argv, env={"DXT_EXTRA_BACKENDS": "os"})
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
        assert "DXT_EXTRA_BACKENDS: cannot load 'os'" in run.stderr


@pytest.mark.skipif(
    os.geteuid() == 0 and not shutil.which("setpriv"), reason="root without setpriv reads it"
)
def test_a_folder_it_may_not_read_is_named(tmp_path):
    closed = tmp_path / "closed"
    (closed / "examon").mkdir(parents=True)
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("metric,plugin\na,p\n")
    closed.chmod(0)
    try:
        run = dxt("coverage", "examon", "--archive", str(closed), "--catalog", str(catalog),
                  "--start-day", "2024-05-01", "--end-day", "2024-05-01",
                  prefix=NO_OVERRIDE)  # fmt: skip
    finally:
        closed.chmod(0o755)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "Permission denied" in run.stderr and str(closed) in run.stderr


def test_plugin_options_not_utf8_name_the_file(tmp_path):
    bad = tmp_path / "opts.toml"
    bad.write_bytes(b"\xff\xfe")
    run = dxt("extract", "examon", "--url", "http://127.0.0.1:1", "--plugin-options", str(bad),
              "--archive", str(tmp_path / "a"), "--start-day", "2024-05-01")  # fmt: skip
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert f"{bad}: cannot read plugin options (TOML, UTF-8)" in run.stderr


@pytest.mark.skipif(
    os.geteuid() == 0 and not shutil.which("setpriv"), reason="root without setpriv reads it"
)
def test_a_record_it_may_not_read_is_not_called_damaged(tmp_path):
    """A mode-000 record was "unreadable ...; restore it or write it again": advice for a
    damaged file, not for permissions."""
    record = tmp_path / ".dxt-days-examon.json"
    record.write_text("{}")
    record.chmod(0)
    code = (
        "from pathlib import Path; from dxt_core.fsio import read_json_object\n"
        f"read_json_object(Path({str(record)!r}), 'day definition', 'restore it')"
    )
    run = subprocess.run(
        [*NO_OVERRIDE, sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert "the day definition cannot be read (Permission denied): give this user read" in (
        run.stderr
    ), run.stderr
    assert "restore it" not in run.stderr
