"""Probe: backfills created beside a catching-up scheduler on ``airflow standalone`` (SQLite).

Not a test (pytest does not collect it: it takes minutes and measures a rate); run it as::

    python -m tests.airflow.probe_sqlite_backfills [--connect-args ours|timeout-only]
        [--runs 3] [--creations 5]

Each run starts a fresh Airflow home, the Examon simulator and ``airflow standalone``,
unpauses ``dxt_examon`` with a 30-day catch-up (the scheduler and four task processes busy),
then creates ``--creations`` backfills of 31 days through ``POST /api/v2/backfills``, each
cancelled before the next, and reports the answers' status codes, the runs made and whether
every Airflow component was still running. ``ours`` is
``dxt_core.airflow.sqlite.CONNECT_ARGS``; ``timeout-only`` is the 60 s busy timeout without
its savepoint and event-loop rules (what the project set before). Each creation's status code
and seconds are listed: a 500 after about 5 s is the API server's action log giving up on the
lock on its event loop (``LOOP_BUSY_TIMEOUT_S`` in ``dxt_core/airflow/sqlite.py``); a run whose
API server stops answering for a minute is reported as ``stalled`` (what that wait did with
the 60 s timeout: docs/ui.md). Ctrl-C stops the running stack, prints the totals of the
stacks that finished with ``"interrupted": true`` and exits 130.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.airflow.conftest import airflow, free_port
from tests.browser.stack import Stack, stack_env
from tests.conftest import SimulatorProcess


def one_run(work: Path, connect_args: str, creations: int) -> dict[str, object]:
    catalog = work / "catalog.csv"
    catalog.write_text("metric,plugin\nambient,ipmi_pub\nstate,nagios_pub\ntemp,ipmi_pub\n")
    sim = SimulatorProcess(["--catalog", str(catalog), "--nodes", "1", "--interval", "600"])
    home = work / "home"
    home.mkdir()
    env = stack_env(home, work / "archive", sim.url, catalog, free_port())
    if connect_args == "timeout-only":
        (work / "timeout_only.py").write_text("CONNECT_ARGS = {'timeout': 60.0}\n")
        env["PYTHONPATH"] = str(work)
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"] = "timeout_only.CONNECT_ARGS"
    start = dt.date.today() - dt.timedelta(days=30)
    env.update({"DXT_EXAMON_CATCHUP": "true", "DXT_EXAMON_START_DATE": start.isoformat()})
    airflow(env, "db", "migrate")
    st = Stack(env, work / "standalone.log")
    codes: list[int] = []
    seconds: list[float] = []
    out: dict[str, object] = {"connect_args": connect_args, "codes": codes, "seconds": seconds}
    try:
        st.wait_up()
        st.wait(lambda: st.get("/api/v2/dags/dxt_examon")["dag_id"], 240, "dxt_examon")
        r = st.request("PATCH", "/api/v2/dags/dxt_examon", json={"is_paused": False})
        r.raise_for_status()
        st.wait(
            lambda: st.get("/api/v2/dags/dxt_examon/dagRuns?state=running")["total_entries"],
            180,
            "the catch-up's runs",
        )
        for i in range(creations):
            first = dt.date(2023, 1, 1) + dt.timedelta(days=31 * i)
            body = {
                "dag_id": "dxt_examon",
                "from_date": f"{first}T00:00:00Z",
                "to_date": f"{first + dt.timedelta(days=30)}T00:00:00Z",
                "reprocess_behavior": "none",
                "max_active_runs": 1,
            }
            t0 = time.monotonic()
            answer = st.request("POST", "/api/v2/backfills", retry_busy=False, json=body)
            codes.append(answer.status_code)
            seconds.append(round(time.monotonic() - t0, 1))
            st.cancel_open_backfills("dxt_examon", wait=False)
            time.sleep(1)
        runs = st.get("/api/v2/dags/dxt_examon/dagRuns?run_type=backfill&limit=1")
        out["backfill_runs"] = runs["total_entries"]
        time.sleep(10)  # a scheduler killed by a clean-up dies within seconds
        st._check_components()  # raises if a component of standalone has exited
        out["outcome"] = "all components running"
    except httpx.TimeoutException:
        out["outcome"] = "stalled (the API server did not answer within 60 s)"
    except AssertionError as exc:
        out["outcome"] = str(exc).splitlines()[0]
    finally:
        st.stop()
        sim.stop()
    out["refused_503"] = codes.count(503)
    out["failed_500"] = codes.count(500)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.airflow.probe_sqlite_backfills",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("--connect-args", choices=["ours", "timeout-only"], default="ours")
    p.add_argument("--runs", type=int, default=3, help="fresh stacks, one after the other")
    p.add_argument("--creations", type=int, default=5, help="backfills created per stack")
    a = p.parse_args(argv)
    results = []
    interrupted = False
    try:
        for _ in range(a.runs):
            with tempfile.TemporaryDirectory(prefix="dxt-probe-sqlite-") as tmp:
                results.append(one_run(Path(tmp), a.connect_args, a.creations))
            print(json.dumps(results[-1]), flush=True)
    except KeyboardInterrupt:  # the stack was stopped by one_run's finally
        interrupted = True
    answered = [c for r in results for c in r["codes"]]  # type: ignore[attr-defined]
    took = [t for r in results for t in r["seconds"]]  # type: ignore[attr-defined]
    print(
        json.dumps(
            {
                "connect_args": a.connect_args,
                "stacks": len(results),
                "creations_answered": len(answered),
                "refused_503": answered.count(503),
                "failed_500": answered.count(500),
                "slowest_answer_s": max(took, default=None),
                "stacks_with_an_exited_component": sum(
                    "exited" in str(r["outcome"]) for r in results
                ),
                "stacks_stalled": sum("stalled" in str(r["outcome"]) for r in results),
                "interrupted": interrupted,
            }
        )
    )
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
