"""The numbers check of Examon answers under every Python 3.11+ on this machine: early
CPython 3.11 releases (Debian 12's 3.11.2) match possessive repeats of groups wrongly, which
made every numeric metric-day fail there. The module picks patterns that give the known
answers; this runs it under each interpreter, in a process of its own."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

CASES = [
    (b"[1,2]", True, b""),
    (b"[1,-2.5e-3],[2,0]", True, b""),
    (b"[1,0.30000000000000004],[2,24]", True, b""),
    (b"[1,1E+5],[2,-0]", True, b""),
    (b"[1,2],[3,]", False, b"[3,]"),
    (b"[1,1-2e],[3,4]", False, b"[1,1-2e]"),
    (b"[1,2],[3,.5],[5,6]", False, b"[3,.5]"),
    (b"[1,01]", False, b"[1,01]"),
    (b"[1,1.],[2,2]", False, b"[1,1.]"),
    (b"[1,+1]", False, b"[1,+1]"),
    (b"[1,1e5.2]", False, b"[1,1e5.2]"),
]

SCRIPT = """
import json, sys
from dxt_core.backends.examon import json_numbers as j
cases = json.loads(sys.stdin.read())
out = []
for inner, ok, bad in cases:
    b = inner.encode()
    out.append([j.valid_numbers(b), "" if ok else j.bad_pair(b).decode()])
print(json.dumps({"version": sys.version.split()[0], "possessive": j.POSSESSIVE_OK, "out": out}))
"""


def _interpreters() -> list[str]:
    """This environment's Python, and the system's (Debian's) when there is one."""
    found = [sys.executable]
    exe = shutil.which("/usr/bin/python3.11")
    if exe:
        found.append(exe)
    return found


@pytest.mark.parametrize("python", _interpreters())
def test_every_interpreter_gives_the_known_answers(python: str) -> None:
    cases = [[i.decode(), ok, bad.decode()] for i, ok, bad in CASES]
    run = subprocess.run(
        [python, "-c", SCRIPT],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["out"] == [[ok, bad] for _, ok, bad in cases], got


def test_debian_3_11_2_takes_the_patterns_without_possessive_quantifiers() -> None:
    """The interpreter that showed the fault: its possessive patterns are refused."""
    exe = "/usr/bin/python3.11"
    probe = "import sys; print(sys.version.split()[0])"
    if not shutil.which(exe):
        pytest.skip(f"{exe} is not installed (Debian 12's python3.11)")
    version = subprocess.run([exe, "-c", probe], capture_output=True, text=True).stdout.strip()
    if version != "3.11.2":
        pytest.skip(f"{exe} is {version}, not Debian 12's 3.11.2")
    run = subprocess.run(
        [
            exe,
            "-c",
            "from dxt_core.backends.examon import json_numbers as j; print(j.POSSESSIVE_OK)",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert run.stdout.strip() == "False", run.stdout + run.stderr
