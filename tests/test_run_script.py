"""``./run test``: which arguments go to the fast tier's parallel workers and which to one plain
pytest. The script runs for real; the environment's Python is a stand-in that prints the
arguments it was given (DXT_VENV), so no test suite runs inside this one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text('#!/bin/sh\necho "ARGS: $*"\n')
    python.chmod(0o755)
    stamp = tmp_path / "venv" / ".dxt-installed"
    stamp.touch()
    # newer than pyproject.toml, so setup() installs nothing
    later = (ROOT / "pyproject.toml").stat().st_mtime + 10
    os.utime(stamp, (later, later))
    return tmp_path / "venv"


def run_test(venv: Path, *args: str) -> str:
    env = {**os.environ, "DXT_VENV": str(venv)}
    env.pop("DXT_TEST_WORKERS", None)
    out = subprocess.run(
        [str(ROOT / "run"), "test", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("ARGS: ")]
    return line.removeprefix("ARGS: ")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), "-m pytest -n 4"),
        (("-x", "-q"), "-m pytest -n 4 -x -q"),
        (("--durations", "20"), "-m pytest -n 4 --durations 20"),
        (("-p", "no:cacheprovider"), "-m pytest -n 4 -p no:cacheprovider"),
        # what chooses tests or workers runs as given, in one plain pytest
        (("tests/unit",), "-m pytest tests/unit"),
        (
            ("-q", "tests/test_run_script.py::test_x"),
            "-m pytest -q tests/test_run_script.py::test_x",
        ),
        (("-k", "procs"), "-m pytest -k procs"),
        (("-m", "not airflow"), "-m pytest -m not airflow"),
        (("-n", "2"), "-m pytest -n 2"),
        (("--tier", "light"), "-m pytest --tier light"),
        (("-p", "no:xdist"), "-m pytest -p no:xdist"),
    ],
)
def test_options_pass_on_to_the_workers_and_choices_run_as_given(venv, args, expected):
    assert run_test(venv, *args) == expected


def test_run_without_a_command_lists_every_command_and_exits_2():
    out = subprocess.run([str(ROOT / "run")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    commands = [line.split()[2] for line in out.stdout.splitlines() if line.startswith("#   ./run")]
    assert commands == ["demo", "test", "test", "lint", "bench"]
