"""The services the production-path test uses are its own (issue 15): a redis-server it starts
on a free port, in memory, and stops; a missing service skips on a developer's machine and
fails under CI=true."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT


def redis_command(url: str, *words: str) -> bytes:
    host, port = url.removeprefix("redis://").split("/")[0].split(":")
    cmd = f"*{len(words)}\r\n" + "".join(f"${len(w)}\r\n{w}\r\n" for w in words)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(cmd.encode())
        return s.recv(4096)


def test_redis_is_our_own_in_memory_server(redis_url, tmp_path_factory):
    assert redis_url.startswith("redis://127.0.0.1:")
    assert not redis_url.startswith("redis://127.0.0.1:6379/")
    assert redis_command(redis_url, "PING") == b"+PONG\r\n"
    assert redis_command(redis_url, "CONFIG", "GET", "save") == b"*2\r\n$4\r\nsave\r\n$0\r\n\r\n"
    assert b"appendonly\r\n$2\r\nno" in redis_command(redis_url, "CONFIG", "GET", "appendonly")
    workdir = redis_command(redis_url, "CONFIG", "GET", "dir").split(b"\r\n")[-2].decode()
    assert workdir.startswith(str(tmp_path_factory.getbasetemp()))


@pytest.mark.slow  # 7 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_redis_is_stopped_afterwards(tmp_path):
    """Run a test that uses the fixture in a child pytest, then check the port is closed."""
    test = tmp_path / "test_child.py"
    test.write_text(
        textwrap.dedent(
            """
            def test_child(redis_url):
                print("URL", redis_url)
            """
        )
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-s",
            "-q",
            "-p",
            "no:cacheprovider",
            str(test),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "CI"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    url = next(w for w in out.stdout.split() if w.startswith("redis://"))
    port = int(url.split(":")[2].split("/")[0])
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


@pytest.mark.parametrize("ci", [None, "true"])
def test_missing_redis_server_skips_locally_and_fails_in_ci(tmp_path, ci):
    test = tmp_path / "test_child.py"
    test.write_text("def test_child(redis_url):\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = str(tmp_path)  # no redis-server on PATH
    if ci:
        env["CI"] = ci
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-rs",
            "-q",
            "-p",
            "no:cacheprovider",
            str(test),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    # tests.services.require_service names the service
    assert "redis-server is missing" in out.stdout, out.stdout + out.stderr
    if ci:
        assert out.returncode == 1 and "1 error" in out.stdout
        assert "CI is set: a missing service fails instead of skipping" in out.stdout
    else:
        assert out.returncode == 0 and "1 skipped" in out.stdout


@pytest.mark.slow  # a pytest of its own: 3-5 s
@pytest.mark.parametrize("ci", [None, "true"])
def test_kwollect_sql_tests_without_their_database_skip_locally_and_fail_in_ci(ci):
    """Kwollect's own SQL function tests (PL/Python in PostgreSQL) go through
    require_service too: with no PostgreSQL where they look, CI fails."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["DXT_TEST_PG_DSN"] = "host=127.0.0.1 port=1 user=postgres dbname=postgres"
    if ci:
        env["CI"] = ci
    test = "tests/integration/kwollect/test_real_function.py"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert "PostgreSQL is missing" in out.stdout, out.stdout + out.stderr
    if ci:
        assert out.returncode == 1 and "error" in out.stdout, out.stdout[-2000:]
    else:
        assert out.returncode == 0 and "skipped" in out.stdout, out.stdout[-2000:]
