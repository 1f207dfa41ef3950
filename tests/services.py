"""The services a test tier needs (PostgreSQL, PL/Python, Redis, chromium, Prometheus...), and
the databases a run creates in them.

A missing service goes through :func:`require_service`: on a developer's machine the test
skips with a message naming the service and how to install it; under ``CI=true`` the test
fails, so a tier that needs a real server never turns into a silent skip in CI.

Every database a test creates on the shared PostgreSQL is registered with
:func:`track_database` before it is created and unregistered once dropped; the cleanup plugin
(tests/cleanup.py) drops what is left when a run is interrupted and at its end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import ssl
import subprocess
import threading
from pathlib import Path
from typing import NoReturn

import pytest

PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"

_databases: dict[str, tuple[str, ...]] = {}
_lock = threading.Lock()


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_service(name: str, reason: str) -> NoReturn:
    """``name`` (a server, a program, an extension) is missing: skip the test, saying which
    and ``reason`` (what needs it, how to install it); under ``CI=true`` fail instead."""
    message = f"{name} is missing: {reason}"
    if in_ci():
        pytest.fail(f"{message} (CI is set: a missing service fails instead of skipping)")
    pytest.skip(message)


def program(name: str, install: str) -> str:
    """The path of program ``name`` on PATH, else :func:`require_service` with ``install``
    (e.g. ``"apt-get install prometheus"``)."""
    found = shutil.which(name)
    if found is None:
        require_service(name, f"the program is not on PATH ({install})")
    return found


def self_signed_cert(directory: Path, name: str = "127.0.0.1") -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` (an IP address or a DNS name) and its key,
    made by openssl in ``directory``: ``(certificate, key)``."""
    exe = program("openssl", "it makes the test certificate: apt-get install openssl")
    alt = f"IP:{name}" if name.replace(".", "").isdigit() else f"DNS:{name}"
    crt, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [exe, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", f"/CN={name}", "-addext", f"subjectAltName={alt}",
         "-keyout", str(key), "-out", str(crt)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return crt, key


def server_tls_context(directory: Path, name: str = "127.0.0.1") -> ssl.SSLContext:
    """A server TLS context with :func:`self_signed_cert`'s certificate for ``name``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*self_signed_cert(directory, name))
    return ctx


def psql(sql: str, db: str = "postgres") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *("psql", "-h", PG_HOST, "-p", str(PG_PORT), "-U", PG_USER, "-d", db),
            *("-v", "ON_ERROR_STOP=1", "-X", "-q", "-c", sql),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PGCONNECT_TIMEOUT": "5"},
    )


def require_postgres() -> None:
    """PostgreSQL answers as postgres@127.0.0.1:5432, else :func:`require_service`."""
    if shutil.which("psql") is None:
        require_service("psql", "PostgreSQL's client (apt-get install postgresql-client)")
    probe = psql("select 1")
    if probe.returncode != 0:
        require_service(
            "PostgreSQL",
            f"not reachable as {PG_USER}@{PG_HOST}:{PG_PORT} (.ci/run starts it): "
            f"{probe.stderr.strip()[-300:]}",
        )


def track_database(name: str, roles: tuple[str, ...] = ()) -> None:
    """Register database ``name`` (and cluster-wide ``roles``) for dropping at the end of the
    run, before it is created."""
    with _lock:
        _databases[name] = roles


def untrack_database(name: str) -> None:
    with _lock:
        _databases.pop(name, None)


def drop_tracked_databases() -> list[str]:
    """Drop every registered database (its sessions ended first) and role; returns the names
    of those that existed and were dropped. psql's errors are kept in the returned lines."""
    with _lock:
        left = dict(_databases)
    done = []
    for name, roles in left.items():
        exists = psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'")
        out = psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        for role in roles:
            psql(f"DROP ROLE IF EXISTS {role}")
        note = "" if out.returncode == 0 else f" (psql: {out.stderr.strip()[-200:]})"
        if note or "(1 row)" in exists.stdout:
            done.append(name + note)
        untrack_database(name)
    return done


class TlsFront:
    """https://127.0.0.1:PORT relaying every connection, bytes as they are, to the plain
    HTTP server ``upstream`` (a TLS-terminating proxy with a self-signed certificate)."""

    def __init__(self, upstream: str, tls) -> None:
        import socket
        import threading
        from urllib.parse import urlsplit

        up = urlsplit(upstream)
        self.upstream = (up.hostname, up.port)
        self.tls = tls
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.sock.getsockname()[1]}"
        self.threads: list[threading.Thread] = []
        self.accepting = threading.Thread(target=self._accept, daemon=True)
        self.accepting.start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _serve(self, conn) -> None:
        import socket
        import threading

        try:
            client = self.tls.wrap_socket(conn, server_side=True)
        except OSError:  # the client refused the certificate
            conn.close()
            return
        server = socket.create_connection(self.upstream)

        def pipe(a, b) -> None:
            try:
                while data := a.recv(65536):
                    b.sendall(data)
            except OSError:
                pass
            finally:
                for s in (a, b):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)

        back = threading.Thread(target=pipe, args=(server, client), daemon=True)
        back.start()
        pipe(client, server)
        back.join(timeout=10)
        client.close()
        server.close()

    def close(self) -> None:
        import socket

        with contextlib.suppress(OSError):  # wakes the accept() (a close alone does not)
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.accepting.join(timeout=10)
        for t in self.threads:
            t.join(timeout=10)
