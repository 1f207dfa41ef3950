"""One exit status for "the server could not be reached", whatever the backend and mode
(a closed loopback port: the connection is refused at once)."""

from __future__ import annotations

import atexit
import socket
import subprocess
import sys

import pytest

# A port held by this process, bound but not listening: a connection to it is refused, and
# no other test's server can take it meanwhile (a port only found free at import was taken
# by a simulator in another worker once, in a clean-clone CI run: a 500, not a refusal).
_HELD = socket.socket()
_HELD.bind(("127.0.0.1", 0))
DOWN = f"http://127.0.0.1:{_HELD.getsockname()[1]}"

# closed at exit, not left to the collector: an "unclosed socket" ResourceWarning ended every
# run, since each worker imports this module to collect it, selected or not
atexit.register(_HELD.close)


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        # archive mode of Examon: every metric-day fails on the connection
        ["examon", "--url", DOWN, "--metric", "ambient", "--plugin", "ipmi_pub", "--retries", "0",
         "--start-day", "2020-03-09", "--archive", "{tmp}/a"],
        # Kwollect's archive mode (each site's listing) and experiment backup (before any unit)
        ["kwollect", "--api-url", DOWN, "--nodes", "nova-1.lyon", "--start-day", "2024-11-01",
         "--archive", "{tmp}/a"],
        ["kwollect", "--api-url", DOWN, "--nodes", "nova-1.lyon", "--start",
         "2024-11-26T15:00:00+01:00", "--end", "2024-11-26T16:00:00+01:00", "--backup", "{tmp}/b"],
        # collectd: the version check before any unit
        ["collectd-es", "--url", DOWN, "--out", "{tmp}/c", "2019-02-01T00:00:00",
         "2019-02-01T01:00:00"],
    ],
    ids=["examon", "kwollect-archive", "kwollect-backup", "collectd-es"],
)  # fmt: skip
def test_an_unreachable_server_exits_4(args, tmp_path):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    out = subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", "extract", *argv],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 4, (out.returncode, out.stderr[-2000:])
    assert "Connection refused" in out.stderr


def test_the_dxt_command_says_run_it_again_without_naming_airflow(tmp_path):
    """An unreachable server's error tells the command's user to run it again; that an
    Airflow task is retried on its own is said under Airflow only (dxt_core.airflow.tasks)."""
    out = subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", "extract", "prometheus", "--url", DOWN,
         "--metrics", "m", "--retries", "0", "--start-day", "2020-03-09", "--archive",
         str(tmp_path / "a")],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert out.returncode == 4, (out.returncode, out.stderr[-2000:])
    assert "run it again once the server answers" in out.stderr, out.stderr
    assert "Airflow" not in out.stdout + out.stderr, out.stderr


def _statuses(text: str) -> set[str]:
    import re

    return set(re.findall(r"(?<![\d./:-])(?:[0-4]|1[34][01]) (?=[a-z(])", text))


def test_dxt_help_and_the_readme_list_the_same_exit_statuses() -> None:
    """README's exit status paragraph and the epilog of ``dxt --help`` name the same statuses:
    130 for SIGTERM and SIGHUP too, 141 and 2 for standard output (dxt_core/stdio.py), 4 of a
    reconcile that cannot reach its server."""
    from pathlib import Path

    from dxt_core.cli import build_parser

    epilog = " ".join((build_parser().epilog or "").split())
    readme = " ".join((Path(__file__).parents[3] / "README.md").read_text().split())
    paragraph = readme[readme.index("Exit status, the same for every backend") :]
    paragraph = paragraph[: paragraph.index("`dxt coverage` prints the refill")]
    assert (
        _statuses(epilog) == _statuses(paragraph) == {"0 ", "1 ", "2 ", "3 ", "4 ", "130 ", "141 "}
    )
    for said in (epilog, paragraph):
        assert "Ctrl-C, SIGTERM or SIGHUP" in said, said
        assert "| head" in said and "> /dev/full" in said, said
        assert "5 counts in a row" in said and "reconcile" in said, said
        assert "keeps its own status unless it was 0" in said, said
