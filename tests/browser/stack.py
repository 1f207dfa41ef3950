"""A real Airflow with signed-in users, for the plugin and browser tests.

``airflow standalone`` (scheduler, dag-processor, triggerer, API server; SQLite,
LocalExecutor) or ``airflow api-server`` alone, with the simple auth manager's users
``admin`` (admin), ``viewer`` (viewer) and ``nobody`` (no role), passwords from a file the
test writes. Nothing here fakes Airflow: requests go over HTTP to the running server.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path

import httpx

from dxt_core import procs
from dxt_core.demo import PAUSE_SETTLES_S
from tests.airflow.conftest import AIRFLOW, base_env, free_port

PASSWORDS = {"admin": "admin-pw", "viewer": "viewer-pw", "nobody": "nobody-pw"}
USERS = "admin:admin,viewer:viewer,nobody:"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def stack_env(home: Path, archive: Path, sim_url: str, catalog: Path | None, port: int) -> dict:
    env = base_env(home, archive, sim_url, catalog)
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    env.update(
        {
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}/execution/",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",  # four worker processes, not 32
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USERS,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            # the repository's plugins/ folder, beside the package's entry point
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(Path(__file__).resolve().parents[2] / "plugins"),
        }
    )
    return env


class Stack:
    """A running Airflow (``standalone`` or ``api-server``) and an HTTP client for it."""

    def __init__(self, env: dict[str, str], log: Path, command: str = "standalone") -> None:
        self.env = env
        self.port = int(env["AIRFLOW__API__PORT"])
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self._log = log.open("w")
        args = [AIRFLOW, "standalone"] if command == "standalone" else [AIRFLOW, "api-server"]
        self.proc = procs.start(
            args, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._tokens: dict[str, str] = {}
        self._watch = procs.StandaloneWatch(self.proc) if command == "standalone" else None

    def wait_up(self, timeout: float = 240) -> None:
        self.wait(
            lambda: httpx.get(f"{self.base}/api/v2/monitor/health", timeout=5).status_code == 200,
            timeout,
            "the API server",
        )

    def token(self, user: str = "admin") -> str:
        if user not in self._tokens:
            r = httpx.post(
                f"{self.base}/auth/token",
                json={"username": user, "password": PASSWORDS[user]},
                timeout=30,
            )
            r.raise_for_status()
            self._tokens[user] = r.json()["access_token"]
        return self._tokens[user]

    def request(
        self, method: str, path: str, user: str | None = "admin", retry_busy: bool = True, **kw
    ) -> httpx.Response:
        """Airflow's answer. A changing request answered 500 "Database error" is asked again
        (3 s apart, five times; not with ``retry_busy=False``), as the coverage view does: on
        SQLite the API server writes its action log on its event loop before the route runs,
        and gives up after 5 s when a request of its own holds the write lock
        (dxt_core/airflow/sqlite.py)."""
        headers = dict(kw.pop("headers", {}))
        if user is not None:
            headers["Authorization"] = f"Bearer {self.token(user)}"
        for attempt in range(6):
            r = httpx.request(
                method,
                f"{self.base}{path}",
                headers=headers,
                timeout=60,
                follow_redirects=False,
                **kw,
            )
            if method == "GET" or not retry_busy or not _database_error(r) or attempt == 5:
                return r
            print(f"{method} {path}: Airflow answered 500 'Database error'; asking again")
            time.sleep(3)
        raise AssertionError("unreachable")

    def get(self, path: str, user: str = "admin") -> dict:
        r = self.request("GET", path, user)
        r.raise_for_status()
        return r.json()

    def wait(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
                if last:
                    return last
            except (httpx.HTTPError, KeyError, StopIteration):
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"airflow exited early; see {self.log_path}")
            self._check_components()
            time.sleep(2)
        what = what() if callable(what) else what  # a callable describes what it saw
        raise AssertionError(f"timed out waiting for {what}; last: {last}")

    def _check_components(self) -> None:
        """Fail at once when a component of ``standalone`` has exited (procs.StandaloneWatch:
        standalone does not start it again, so every wait would run to its timeout)."""
        if self._watch is not None and (name := self._watch.exited()):
            raise AssertionError(
                f"airflow {name} exited under standalone; its last lines:\n"
                f"{self.log_tail(name, 60)}"
            )

    def log_tail(self, component: str, lines: int = 40) -> str:
        """The last ``lines`` lines ``component`` (scheduler, api-server, ...) wrote to the
        standalone log: what a failed wait shows, since CI keeps no files."""
        self._log.flush()
        mine = [
            line.rstrip()
            for line in self.log_path.read_text(errors="replace").splitlines()
            if line.startswith(f"{component} ")
        ]
        return "\n".join(mine[-lines:])

    def set_backfill(self, bid: int, action: str, timeout: float = 240) -> dict:
        """``PUT /api/v2/backfills/{bid}/{action}`` (``pause`` or ``cancel``) until Airflow
        has done it; the backfill as Airflow then shows it.

        On SQLite the API server's write waits for the lock: with a 60 s busy timeout on its
        event loop the answer could come after the client's 60 s (CI, 2026-12-05: the pause
        after a refill, ``httpx.ReadTimeout``; docs/ui.md says why) and the change still land,
        or come as a 503 ("database is locked"). Either is asked again, once the backfill's
        own record shows it has not landed. Airflow's 409 (the
        backfill completed meanwhile) gives the backfill as it is; any other answer fails."""
        done = {"pause": lambda b: b["is_paused"], "cancel": lambda b: b["completed_at"]}[action]

        def landed():
            try:
                r = self.request("PUT", f"/api/v2/backfills/{bid}/{action}")
            except httpx.TimeoutException:
                b = self.get(f"/api/v2/backfills/{bid}")
                return done(b) and b
            if r.status_code in (200, 409):
                return r.json() if r.status_code == 200 else self.get(f"/api/v2/backfills/{bid}")
            if r.status_code != 503:
                raise AssertionError(f"{action} of backfill {bid}: {r.status_code} {r.text}")
            return None

        return self.wait(landed, timeout, f"backfill {bid}'s {action} to land")

    def cancel_open_backfills(self, dag_id: str, timeout: float = 240, wait: bool = True) -> None:
        """Cancel every backfill of ``dag_id`` not completed yet and (``wait``) wait until none
        is open.

        On SQLite the API server's cancel waits for the scheduler's writes: a cancel may answer
        after the client's 60 s (seen in CI: ``httpx.ReadTimeout``) and still take effect, so
        a timed-out cancel is asked again until the listing shows the backfill completed."""

        def open_ids() -> list[int]:
            listing = self.get(f"/api/v2/backfills?dag_id={dag_id}")["backfills"]
            return [b["id"] for b in listing if not b["completed_at"]]

        def cancelled() -> bool:
            left = open_ids()
            # Paused first: the scheduler starts no queued run of a paused backfill
            # (DagRun.get_queued_dag_runs_to_set_running), so the cancel's update of the
            # queued runs to failed does not meet a run it is starting. Cancelled at once,
            # Airflow 3.3.2's scheduler on SQLite once died of it (CI, 2026-12-04: "UPDATE
            # statement on table 'dag_run' expected to update 1 row(s); 0 were matched").
            paused = False
            for bid in left:
                with contextlib.suppress(httpx.TimeoutException):
                    paused |= (
                        self.request("PUT", f"/api/v2/backfills/{bid}/pause").status_code == 200
                    )
            if paused:
                time.sleep(PAUSE_SETTLES_S)  # the scheduler's loop in progress ends
            for bid in left:
                # asked again on the next round if it did not land
                with contextlib.suppress(httpx.TimeoutException):
                    self.request("PUT", f"/api/v2/backfills/{bid}/cancel")
            return not left

        if wait:
            self.wait(cancelled, timeout, f"the backfills of {dag_id} to be cancelled")
        else:
            with contextlib.suppress(httpx.HTTPError):
                cancelled()

    def stop(self) -> None:
        procs.stop(self.proc, 60)
        self._log.close()


def start_api_server(
    home: Path, archive: Path, catalog: Path | None, log: Path, sim_url: str = "http://127.0.0.1:1"
) -> Stack:
    """An API server alone; its Examon connection points at ``sim_url`` (default: nothing
    listens, for tests that never reach the source)."""
    env = stack_env(home, archive, sim_url, catalog, free_port())
    stack = Stack(env, log, command="api-server")
    try:
        stack.wait_up()
    except BaseException:
        stack.stop()
        raise
    return stack


def _database_error(r: httpx.Response) -> bool:
    """Airflow's 500 for a SQLAlchemy error (airflow/api_fastapi/common/exceptions.py)."""
    if r.status_code != 500:
        return False
    try:
        detail = r.json().get("detail")
    except ValueError:
        return False
    return isinstance(detail, dict) and detail.get("reason") == "Database error"
