"""``dxt extract collectd-es`` stopped (Ctrl-C, SIGTERM) said only "interrupted": not that
nothing was written (its file is written whole at the end), nor what to do. Here the server
accepts the connection and never answers (a real socket), and the command gets SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DXT = str(Path(sys.executable).parent / "dxt")


def test_an_interrupted_export_says_nothing_was_written(tmp_path):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        out = tmp_path / "out.hdf5"
        p = subprocess.Popen(
            [DXT, "extract", "collectd-es", "--url", f"http://127.0.0.1:{port}",
             "2024-01-01T00:00:00", "2024-01-01T01:00:00", "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        conn, _ = silent.accept()  # its first request, never answered
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        conn.close()
    assert p.returncode == 130, err
    assert f"nothing was written: {out} was not created" in err, err
    assert "run the same command again" in err and "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == []
