"""``dxt demo``: the whole pipeline on one machine, with nothing to configure.

Starts the Examon simulator and Airflow (``airflow standalone``: SQLite, LocalExecutor,
scheduler, dag-processor, API server and UI), backfills the last few days of a small slice of
the Marconi100 catalog through ``airflow backfill create``, then prints what was archived,
where, and the UI's address (no login).

It can run again in the same folder: ``--exit`` waits for the scheduler to close the backfill,
and a backfill an earlier demo left open is cancelled at start. Ctrl-C (SIGINT), ``kill``
(SIGTERM) and a closing terminal (SIGHUP) all stop what it started: every process of Airflow's
session (SIGTERM, then SIGKILL after a bounded wait), then the simulator. Processes a demo
killed with SIGKILL left behind, or a busy UI port, stop it before it starts anything, with the
command that clears them.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import httpx

from dxt_core import backends as registry
from dxt_core import procs
from dxt_core.archive import Archive
from dxt_core.config import Setting
from dxt_core.coverage import coverage
from dxt_core.errors import ConfigError, DxtError
from dxt_core.procs import has_proc as _has_proc
from dxt_core.procs import proc_stat as _proc_stat
from dxt_core.refill_commands import airflow_day
from dxt_core.runner import INTERRUPTED_EXIT
from dxt_core.simulate import spawn_simulator
from dxt_core.windows import days

#: The backend the demo runs, the embedded default. Its DAG, simulator, catalog, pool,
#: connection and settings all come from its registry entry (this line is the one place the
#: demo names it; tests/contract/test_backend_names.py allows it).
DEMO_BACKEND = "examon"
BACKEND = registry.get(DEMO_BACKEND)
DAG_ID = BACKEND.dag_id


def _setting(name: str) -> Setting:
    """The demo backend's setting ``<backend>_<name>`` (its ``DXT_`` variable, its default)."""
    key = f"{BACKEND.name}_{name}"
    for s in BACKEND.settings:
        if s.key == key:
            return s
    raise ConfigError(f"backend {BACKEND.name!r} has no setting {key!r}, which the demo needs")


def load_catalog(path: Path | None = None) -> Any:
    """The demo backend's catalog (its ``catalog`` module): the shipped one, or ``path``."""
    return BACKEND.module("catalog").load_catalog(path)


def add_demo_parser(sub: Any) -> None:
    """``dxt demo``."""
    d = sub.add_parser(
        "demo",
        help="simulator + Airflow (SQLite) + backfill of the last days, then the UI",
        description=f"Start the {BACKEND.title} simulator and Airflow (standalone, SQLite, "
        "LocalExecutor), backfill the last few days for a small slice of the catalog, print "
        "what was archived and where the UI is, and keep running until Ctrl-C (or SIGTERM, "
        "SIGHUP), which stops everything it started. Rerunning it in the same folder works.",
    )
    d.add_argument("--dir", default=".dxt-demo", help="work directory (default %(default)s)")
    d.add_argument("--days", type=int, default=3, help="days to backfill (default 3)")
    d.add_argument("--metrics-per-plugin", type=int, default=2, help="catalog slice size")
    d.add_argument("--port", type=int, default=8080, help="Airflow UI port (default 8080)")
    d.add_argument("--exit", action="store_true", help="stop after printing the summary")
    d.add_argument("--timeout", type=float, default=900, help="seconds to wait for the backfill")
    d.set_defaults(func=run_demo)


def dags_folder(home: Path) -> Path:
    """The checkout's ``dags/`` folder when the package is installed from one, else the DAG
    files written into ``<home>/dags`` (:mod:`dxt_core.dagfiles`: the same files)."""
    candidates = [Path(__file__).resolve().parent.parent / "dags", Path.cwd() / "dags"]
    for c in candidates:
        if (c / f"{DAG_ID}.py").is_file():
            return c
    from dxt_core.dagfiles import write_dag_files

    written = home / "dags"
    write_dag_files(written, force=True)
    for bak in written.glob("*.py.bak"):  # an older version's files, rewritten
        bak.unlink()
    return written


def _airflow_bin() -> str:
    exe = Path(sys.executable).parent / "airflow"
    if exe.exists():
        return str(exe)
    found = shutil.which("airflow")
    if not found:
        raise ConfigError("the 'airflow' command is missing: pip install 'dxt-archive[airflow]'")
    return found


def demo_catalog(path: Path, per_plugin: int) -> int:
    """Write a slice of the shipped catalog: the first metrics of each plugin."""
    taken: dict[str, int] = {}
    lines = ["metric,plugin"]
    for e in load_catalog():
        if taken.get(e.plugin, 0) < per_plugin:
            taken[e.plugin] = taken.get(e.plugin, 0) + 1
            lines.append(f"{e.metric},{e.plugin}")
    path.write_text("\n".join(lines) + "\n")
    return len(lines) - 1


def start_simulator(
    catalog: Path, log_path: Path, nodes: int = 8
) -> tuple[subprocess.Popen[str], str]:
    """Start the demo backend's simulator on a free port; return the process and its URL."""
    with log_path.open("w") as log:
        return spawn_simulator(
            BACKEND.name, ["--catalog", str(catalog), "--nodes", str(nodes)], log
        )


class Stopped(BaseException):
    """SIGINT, SIGTERM or SIGHUP asked the demo to stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Shutdown:
    """Turns SIGINT, SIGTERM and SIGHUP into :class:`Stopped`, raised once.

    A terminal's Ctrl-C sends SIGINT, ``kill PID`` or a service manager SIGTERM, a closing
    terminal SIGHUP: each ends the demo the same way, stopping what it started. A signal that
    comes while the demo is stopping makes the stop hurry (SIGKILL at once); one that comes
    while a process is being started is held until it is registered for stopping.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.signum: int | None = None
        self.stopping = False
        self.hurry = False
        self._holding = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Shutdown:
        for s in self.SIGNALS:
            self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        if self.stopping:
            self.hurry = True
        elif not self._holding:
            self.stopping = True
            raise Stopped(signum)

    def begin_stop(self) -> None:
        self.stopping = True

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold signals while a process starts and is registered for stopping."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        if self.signum is not None and not self.stopping:
            self.stopping = True
            raise Stopped(self.signum)


def stop_session(proc: subprocess.Popen[Any], timeout: float, shutdown: Shutdown) -> None:
    """Stop ``proc`` and every process of its session (:func:`dxt_core.procs.stop`): SIGTERM,
    then SIGKILL after ``timeout`` seconds, or at once when another signal asks to hurry."""
    procs.stop(proc, timeout, hurry=lambda: shutdown.hurry)


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        st = _proc_stat(Path(f"/proc/{pid}"))
        if st is None:
            break
        pid = st[1]
    return pids


def leftover_processes(home: Path, catalog: Path) -> dict[int, str]:
    """Processes of an earlier demo in this folder still running (pid -> command line): the
    sessions of Airflow processes with this AIRFLOW_HOME, and a simulator serving this
    folder's catalog. Linux only; elsewhere nothing is found."""
    if not _has_proc():
        return {}
    mine = _ancestors()
    # Both variables, as the demo sets them for Airflow: a shell where the user exported
    # AIRFLOW_HOME to use the airflow CLI on the demo is not a leftover.
    marks = {f"AIRFLOW_HOME={home}".encode(), f"{_setting('catalog').env}={catalog}".encode()}
    simulator = f"{BACKEND.package}.simulator"
    found: dict[int, str] = {}
    sessions: set[int] = set()
    commands: dict[int, tuple[int, str]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in mine:
            continue
        st = _proc_stat(d)
        try:
            argv = [a.decode(errors="replace") for a in (d / "cmdline").read_bytes().split(b"\0")]
            environ = set((d / "environ").read_bytes().split(b"\0"))
        except OSError:  # gone, or another user's
            continue
        if st is None or st[0] == "Z":
            continue
        line = " ".join(a for a in argv if a)[:120]
        commands[int(d.name)] = (st[2], line)
        if simulator in argv and str(catalog) in argv:
            found[int(d.name)] = line
        elif marks <= environ:
            found[int(d.name)] = line
            sessions.add(st[2])
    # Airflow runs in a session of its own; some of its processes rewrite their environment
    # with their title (setproctitle), so the whole session is taken.
    sessions.discard(os.getsid(0))
    for pid, (sid, line) in commands.items():
        if sid in sessions:
            found[pid] = line
    return found


def check_port_free(port: int) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ConfigError(
                f"port {port} (the Airflow UI) is in use ({exc.strerror}): another 'dxt demo' "
                "or program listens there; stop it, or pass --port with a free port"
            ) from None


def check_no_leftovers(work: Path, home: Path, catalog: Path, port: int) -> None:
    """Refuse to start over processes of an earlier demo, naming the command that ends them."""
    left = leftover_processes(home, catalog)
    if left:
        pids = " ".join(str(p) for p in sorted(left))
        listing = "\n".join(f"  {pid} {cmd}" for pid, cmd in sorted(left.items()))
        raise ConfigError(
            f"processes of an earlier 'dxt demo --dir {work}' are still running (a demo "
            f"killed with SIGKILL, or one still running):\n{listing}\n"
            f"stop them with:  kill {pids}   (then 'kill -9 {pids}' for any left), "
            "and run the demo again"
        )
    check_port_free(port)


def airflow_env(
    home: Path, archive: Path, catalog: Path, sim_url: str, port: int
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            # standalone starts its components as 'airflow ...' found on PATH
            "PATH": f"{Path(_airflow_bin()).parent}{os.pathsep}{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder(home)),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__API__PORT": str(port),
            # A local demo: the UI listens on loopback only and needs no login.
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            # the connection form's Test button (Airflow 3 ships it disabled)
            "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{port}/execution/",
            # standalone starts its scheduler before its API server, and the backfill is
            # made before either: the first tasks may call the execution API before it
            # listens. The task SDK retries a refused connection 5 times, after random waits
            # that can add up to a few seconds (airflow/sdk/api/client.py, Client.request:
            # wait_random_exponential); 10 tries at 3 s or more wait at least 27 s.
            "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "10",
            "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN": "3",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            # SQLite: wait for the writer's lock instead of failing after 5 s
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "dxt_core.airflow.sqlite.CONNECT_ARGS",
            f"AIRFLOW_CONN_{BACKEND.spec.default_conn_id.upper()}": json.dumps(
                {
                    "conn_type": "http",
                    "host": sim_url.split("://", 1)[1].rsplit(":", 1)[0],
                    "port": int(sim_url.rsplit(":", 1)[1]),
                    "extra": {
                        "time_zone": "Europe/Rome",
                        "cluster": "marconi100",
                        "jobs_url": sim_url,
                    },
                }
            ),
            "DXT_ARCHIVE_ROOT": str(archive),
            _setting("catalog").env: str(catalog),
        }
    )
    return env


def _airflow(env: dict[str, str], *args: str, check: bool = True) -> str:
    # SQLite allows one writer: a CLI call can meet "database is locked" while the
    # scheduler writes, so it is retried a few times.
    for _ in range(10):
        out = subprocess.run(
            [_airflow_bin(), *args], env=env, capture_output=True, text=True, check=False
        )
        if out.returncode == 0 or "database is locked" not in out.stderr:
            break
        time.sleep(3)
    if check and out.returncode != 0:
        raise DxtError(f"airflow {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return out.stdout


def _api_get(port: int, path: str) -> Any:
    r = httpx.get(f"http://127.0.0.1:{port}/api/v2/{path}", timeout=30)
    r.raise_for_status()
    return r.json()


#: Seconds given to the scheduler's loop in progress after a backfill is paused, before it is
#: cancelled.
PAUSE_SETTLES_S = 5.0


def _put_backfill(port: int, backfill_id: int, action: str) -> httpx.Response:
    # SQLite has one writer: the API answers 503 "Database is locked" while the scheduler
    # writes, so the call is retried a few times.
    url = f"http://127.0.0.1:{port}/api/v2/backfills/{backfill_id}/{action}"
    for _ in range(10):
        r = httpx.put(url, timeout=30)
        if r.status_code != 503:
            break
        time.sleep(2)
    return r


def _cancel_backfill(port: int, backfill_id: int) -> bool:
    """Pause the backfill, give the scheduler's loop in progress time to end, then cancel it.

    A paused backfill's queued runs are not started (``DagRun.get_queued_dag_runs_to_set_running``),
    so the cancel, which fails them, does not meet a run the scheduler is starting: cancelled
    at once, Airflow 3.3.2's scheduler on SQLite was seen to die of that ("UPDATE statement on
    table 'dag_run' expected to update 1 row(s); 0 were matched"). 409: it was completed
    meanwhile. Returns whether it was cancelled (False: it had completed)."""
    if _put_backfill(port, backfill_id, "pause").status_code == 200:
        time.sleep(PAUSE_SETTLES_S)
    r = _put_backfill(port, backfill_id, "cancel")
    if r.status_code == 409:
        return False
    r.raise_for_status()
    return True


def unfinished_backfills(port: int) -> list[dict[str, Any]]:
    """Backfills of the demo's DAG that Airflow has not marked complete (at most one: Airflow
    refuses a new backfill while one is open)."""
    got = _api_get(port, f"backfills?dag_id={DAG_ID}&order_by=-id&limit=10")
    return [b for b in got["backfills"] if b.get("completed_at") is None]


def cancel_leftover_backfills(port: int, work: Path) -> None:
    """Cancel a backfill an earlier demo in this folder left open (stopped before the
    scheduler marked it complete), or Airflow refuses the new one (AlreadyRunningBackfill).
    Cancelling fails its queued runs, which the new backfill (--reprocess-behavior failed)
    runs again; finished runs are kept."""
    try:
        for b in unfinished_backfills(port):
            print(
                f"      cancelling backfill {b['id']} ({b['from_date'][:10]}.."
                f"{b['to_date'][:10]}), left open by an earlier demo in this folder",
                flush=True,
            )
            if not _cancel_backfill(port, b["id"]):
                print("      (it completed meanwhile: nothing cancelled)", flush=True)
    except httpx.HTTPError as exc:
        raise DxtError(
            f"a backfill of {DAG_ID} left open by an earlier demo in {work} could not be "
            f"listed or cancelled ({exc}). Start the demo's Airflow afresh (the archive is "
            f"kept):\n  rm -rf {work / 'airflow'}"
        ) from exc


def wait_backfill_complete(port: int, timeout: float) -> None:
    """Wait for the scheduler to mark the backfill complete (it checks every 30 s), so that
    the next demo in this folder can create its own; past ``timeout``, close it through the
    API's cancel, which on a backfill whose runs all finished only records it as complete."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if not unfinished_backfills(port):
                return
        time.sleep(2)
    # If this fails too, the next demo in this folder cancels the backfill when it starts.
    with contextlib.suppress(httpx.HTTPError):
        for b in unfinished_backfills(port):
            _cancel_backfill(port, b["id"])


def _check_standalone(watch: procs.StandaloneWatch, log: Path, doing: str) -> None:
    """Raise when a component of ``airflow standalone`` has exited: standalone does not start
    it again, so what the demo waits for would never come."""
    if watch.proc.poll() is not None:
        raise DxtError(f"airflow standalone exited {doing}; see {log}")
    if gone := watch.exited():
        raise DxtError(
            f"airflow {gone} exited under airflow standalone {doing}, and standalone does not "
            f"start it again. Its lines in {log} begin with '{gone}'; run the demo again "
            "(the archive is kept, and its backfill reruns only what failed)"
        )


def keep_running(watch: procs.StandaloneWatch, log: Path, poll_s: float = 1.0) -> NoReturn:
    """Keep Airflow up for the user until a signal (Stopped); stop with an error naming the
    component of ``airflow standalone`` that exited meanwhile: the UI would go on answering
    while no run starts again, which is what the user came to watch."""
    print("\nAirflow keeps running; press Ctrl-C (or kill this process) to stop.", flush=True)
    while True:
        _check_standalone(watch, log, "while the demo kept it running")
        time.sleep(poll_s)


def _wait_for_dag(port: int, watch: procs.StandaloneWatch, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _check_standalone(watch, log, f"before {DAG_ID} was registered")
        with contextlib.suppress(httpx.HTTPError):
            if _api_get(port, f"dags/{DAG_ID}").get("dag_id") == DAG_ID:
                return
            errors = _api_get(port, "importErrors").get("import_errors") or []
            if errors:
                raise DxtError(f"the DAG file has import errors: {errors}")
        time.sleep(3)
    raise DxtError(f"Airflow did not register the {DAG_ID} DAG in time")


def api_run_day(run: dict[str, Any]) -> str:
    """The day a run of the REST API's answer archives (:func:`dxt_core.airflow.runs.run_day`,
    the rule the run's note and its tasks follow)."""
    from dxt_core.airflow.runs import DAY_PARAM, run_day

    def when(key: str) -> dt.datetime | None:
        value = run.get(key)
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None

    conf = run.get("conf")
    conf = conf if isinstance(conf, dict) else {}
    try:
        return run_day(
            conf.get(DAY_PARAM), when("data_interval_start"), when("logical_date")
        ).isoformat()
    except DxtError:
        return "none"


def wait_for_runs(
    port: int,
    days: set[str],
    timeout: float,
    watch: procs.StandaloneWatch,
    log: Path,
) -> list[dict[str, Any]]:
    """Poll until the runs that archive ``days`` are finished; return them. Stops with an
    error when a component of ``airflow standalone`` has exited (the runs would never
    finish)."""
    deadline = time.monotonic() + timeout
    runs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        finished = sum(r.get("state") in ("success", "failed") for r in runs)
        _check_standalone(watch, log, f"with {finished} of {len(days)} runs finished")
        with contextlib.suppress(httpx.HTTPError):
            every = _api_get(port, f"dags/{DAG_ID}/dagRuns?limit=100")["dag_runs"]
            runs = [r for r in every if api_run_day(r) in days]
        done = [r for r in runs if r.get("state") in ("success", "failed")]
        if len(done) >= len(days):
            return runs
        time.sleep(5)
    raise DxtError(f"backfill not finished after {timeout:.0f} s; runs: {runs}")


def run_demo(args: argparse.Namespace) -> int:
    with Shutdown() as shutdown:
        try:
            return _run_demo(args, shutdown)
        except Stopped as stop:
            with contextlib.suppress(OSError, ValueError):  # the terminal may be gone (SIGHUP)
                print(f"\nstopped by {signal.Signals(stop.signum).name}", file=sys.stderr)
            # 130 whichever signal it was, as every other command exits (README, exit status)
            return INTERRUPTED_EXIT


def create_backfill(env: dict[str, str], create: list[str]) -> bool:
    """Run ``airflow backfill create``; False when Airflow refused it because a backfill of
    the DAG is still open (AlreadyRunningBackfill), which an earlier demo in the folder can
    leave; any other failure is an error."""
    try:
        _airflow(env, *create)
    except DxtError as exc:
        if "AlreadyRunningBackfill" not in str(exc):
            raise
        return False
    return True


def prepare_airflow(env: dict[str, str], first: dt.date, last: dt.date) -> tuple[list[str], bool]:
    """Migrate the database, set the pool, register and unpause the DAG and create the
    backfill of ``first``..``last``, all before ``airflow standalone`` starts. Returns the
    backfill command and whether Airflow made it (False: a backfill an earlier demo left
    open is in the way; :func:`create_backfill`).

    Airflow 3.3.2 commits each backfill run on SQLite as it is made, and when a later one
    meets "database is locked" it deletes those runs again; a scheduler that had picked them
    up dies ("UPDATE statement on table 'dag_run' expected to update 2 row(s); 0 were
    matched", seen in a clean-clone demo; apache/airflow#68699, the clean-up of
    apache/airflow#67900). With no scheduler yet, nothing else writes to the database.
    (:mod:`dxt_core.airflow.sqlite`'s connection arguments, which the demo sets, keep that
    creation from being refused beside a scheduler too; creating it first costs nothing.)"""
    _airflow(env, "db", "migrate")
    pool = str(_setting("pool").default)
    _airflow(env, "pools", "set", pool, "4", f"Concurrent queries to {BACKEND.title}")
    _airflow(env, "dags", "reserialize")
    _airflow(env, "dags", "unpause", DAG_ID)
    create = [
        *("backfill", "create", "--dag-id", DAG_ID),
        *("--from-date", airflow_day(first), "--to-date", airflow_day(last)),
        *("--reprocess-behavior", "failed"),
    ]
    print(f"[3/5] airflow {' '.join(create)}", flush=True)
    return create, create_backfill(env, create)


def check_demo_options(args: argparse.Namespace) -> None:
    """Refuse option values the demo cannot run with, before it starts anything."""
    for flag, value, least in (
        ("--days", args.days, 1),
        ("--metrics-per-plugin", args.metrics_per_plugin, 1),
        ("--port", args.port, 1),
    ):
        if value < least:
            raise ConfigError(f"{flag} {value}: give {least} or more")
    if args.port > 65535:
        raise ConfigError(f"--port {args.port}: give a TCP port, 1 to 65535")
    if not args.timeout > 0:
        raise ConfigError(f"--timeout {args.timeout}: give a number of seconds above 0")


def _run_demo(args: argparse.Namespace, shutdown: Shutdown) -> int:
    check_demo_options(args)
    work = Path(args.dir).resolve()
    home, archive_dir = work / "airflow", work / "archive"
    catalog = work / "catalog.csv"
    check_no_leftovers(work, home, catalog, args.port)
    home.mkdir(parents=True, exist_ok=True)
    archive_dir.mkdir(parents=True, exist_ok=True)
    n_metrics = demo_catalog(catalog, args.metrics_per_plugin)
    today = dt.datetime.now(dt.UTC).date()
    first, last = today - dt.timedelta(days=args.days), today - dt.timedelta(days=1)

    # Stopped in reverse order of starting (Airflow, then the simulator it reads from), on
    # every way out: success, error, or a signal (Shutdown raises Stopped).
    with contextlib.ExitStack() as started:
        print(
            f"[1/5] starting the {BACKEND.title} simulator ({n_metrics} metrics: {catalog})",
            flush=True,
        )
        with shutdown.holding():
            sim, url = start_simulator(catalog, work / "simulator.log")
            started.callback(stop_session, sim, 10, shutdown)
            started.callback(shutdown.begin_stop)
        env = airflow_env(home, archive_dir, catalog, url, args.port)
        env[_setting("start_date").env] = first.isoformat()
        env[_setting("catchup").env] = "false"
        print(f"      simulator at {url}", flush=True)
        print(f"[2/5] preparing Airflow in {home} (SQLite, LocalExecutor)", flush=True)
        create, created = prepare_airflow(env, first, last)
        standalone_log = work / "airflow-standalone.log"
        log = started.enter_context(standalone_log.open("w"))
        with shutdown.holding():
            af = procs.start(
                [_airflow_bin(), "standalone"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            started.callback(stop_session, af, 20, shutdown)
            started.callback(shutdown.begin_stop)
        print("[4/5] starting airflow standalone (scheduler, dag-processor, UI)", flush=True)
        watch = procs.StandaloneWatch(af)
        _wait_for_dag(args.port, watch, standalone_log, 300)
        if not created:
            # An earlier demo in this folder left its backfill open: it is cancelled through
            # the API, which needs the api-server, and the new one is made with the scheduler up.
            cancel_leftover_backfills(args.port, work)
            if not create_backfill(env, create):
                raise DxtError(
                    f"Airflow refused the backfill: one of {DAG_ID} is still open in {home} "
                    "(AlreadyRunningBackfill). Start the demo's Airflow afresh (the archive is "
                    f"kept):\n  rm -rf {home}"
                )
        wanted = {d.isoformat() for d in days(first, last)}
        runs = wait_for_runs(args.port, wanted, args.timeout, watch, standalone_log)
        print("[5/5] done\n", flush=True)
        _summary(archive_dir, catalog, first, last, runs, args.port, home)
        if args.exit:
            # Stopping Airflow before the scheduler closes the backfill would leave it open
            # for the next demo in this folder.
            print("\nwaiting for Airflow to mark the backfill complete, then stopping", flush=True)
            wait_backfill_complete(args.port, 45)
            return 0 if all(r.get("state") == "success" for r in runs) else 1
        keep_running(watch, standalone_log)
    raise AssertionError("unreachable")  # for mypy: ExitStack may swallow exceptions


def _summary(
    archive_dir: Path,
    catalog: Path,
    first: dt.date,
    last: dt.date,
    runs: list[dict[str, Any]],
    port: int,
    home: Path,
) -> None:
    entries = load_catalog(catalog)
    rows = coverage(
        Archive(archive_dir),
        BACKEND.name,
        [(e.plugin, e.metric) for e in entries],
        days(first, last),
        verify=True,
    )
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    files = sorted(archive_dir.rglob("*.csv.gz"))
    size = sum(f.stat().st_size for f in files)
    print("runs:")
    for run in sorted(runs, key=lambda r: str(r.get("logical_date"))):
        print(f"  {run.get('dag_run_id')} (day {api_run_day(run)}): {run.get('state')}")
    print(f"\narchive: {archive_dir}")
    print(
        f"  {len(files)} data files, {size} bytes; metric-days: "
        + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    )
    for f in files[:6]:
        print(f"  {f.relative_to(archive_dir)}")
    if len(files) > 6:
        print(f"  ... and {len(files) - 6} more")
    print(f"\nAirflow UI: http://127.0.0.1:{port}  (local demo: no login needed)")
    print(
        f"archive coverage view: Browse > Archive coverage in the UI, or "
        f"http://127.0.0.1:{port}/dxt-archive/coverage?dag_id={DAG_ID}"
    )
    dxt = Path(sys.executable).parent / "dxt"  # the venv's, which may not be on PATH
    print(
        f"coverage:   {dxt} coverage --archive {archive_dir} --catalog {catalog} "
        f"--start-day {first} --end-day {last}"
    )
    if files:
        print(
            f"pandas:     df = pandas.read_csv('{files[0]}'); "
            "df['timestamp'] = pandas.to_datetime(df['timestamp'], utc=True)"
        )
