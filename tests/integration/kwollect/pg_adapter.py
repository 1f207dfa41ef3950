"""Serves Kwollect's real ``api.get_metrics`` over HTTP the way the Grid'5000 API does.

On Grid'5000, ``/stable/sites/<site>/metrics?nodes=&metrics=&start_time=&end_time=&job_id=
&summary=&as_rate=`` is the site's Kwollect PostgREST (``db-schema = "api"``, anonymous role
``<kwuser>_ro``: kwollect ``kwollect_setup_db.py``) behind the API proxy; PostgREST turns the
query string into named arguments of ``api.get_metrics`` and answers the rows as a JSON array,
or an error as ``{"code", "details", "hint", "message"}`` with a status from the SQLSTATE.
This adapter does that much, and serves a reference API catalogue (``--catalog``: a JSON file
``{"<site>/<cluster>": [metric entries]}``) for the client's planning, with the sites and the
nodes of those clusters (``<cluster>-1`` to ``<cluster>-N``, ``--nodes-per-cluster``, 4 by
default) for its node names check.

Run: ``python -m tests.integration.kwollect.pg_adapter --dsn DSN --role ROLE --catalog FILE``;
the first line on stdout is ``pg-adapter listening on http://HOST:PORT``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg2

#: api.get_metrics's arguments and the types PostgREST casts the query values to.
ARGS = {
    "job_id": "integer",
    "nodes": "text",
    "devices": "text",
    "metrics": "text",
    "start_time": "text",
    "end_time": "text",
    "summary": "boolean",
    "as_rate": "boolean",
}


def http_status(sqlstate: str) -> int:
    """PostgREST's status for a SQLSTATE (docs.postgrest.org, "Errors")."""
    if sqlstate in ("42883", "42P01"):
        return 404
    if sqlstate == "42501":
        return 403
    if sqlstate == "P0001" or sqlstate.startswith("22"):
        return 400
    if sqlstate.startswith("23"):
        return 409
    if sqlstate.startswith("08"):
        return 503
    return 500


class Adapter(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], dsn: str, role: str, catalog: dict, nodes: int = 4
    ) -> None:
        self.dsn, self.role, self.catalog, self.nodes = dsn, role, catalog, nodes
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    server: Adapter
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        if parts[:1] == ["stable"]:
            parts = parts[1:]
        if len(parts) == 3 and parts[0] == "sites" and parts[2] == "metrics":
            self.metrics(parse_qs(url.query, keep_blank_values=True))
        elif len(parts) == 3 and parts[0] == "sites" and parts[2] == "clusters":
            items = [
                {"uid": key.split("/")[1]}
                for key in self.server.catalog
                if key.split("/")[0] == parts[1]
            ]
            self.send(200, {"items": items, "total": len(items), "offset": 0})
        elif len(parts) == 4 and parts[0] == "sites" and parts[2] == "clusters":
            entries = self.server.catalog.get(f"{parts[1]}/{parts[3]}")
            if entries is None:
                self.send(404, {"code": 404, "message": "not found"})
            else:
                self.send(200, {"uid": parts[3], "type": "cluster", "metrics": entries})
        elif parts[4:] == ["nodes"] and f"{parts[1]}/{parts[3]}" in self.server.catalog:
            n = self.server.nodes
            items = [{"uid": f"{parts[3]}-{i}", "type": "node"} for i in range(1, n + 1)]
            self.send(200, {"items": items, "total": n, "offset": 0})
        elif parts == ["sites"] or (len(parts) == 2 and parts[0] == "sites"):
            sites = sorted({key.split("/")[0] for key in self.server.catalog})
            if len(parts) == 1:
                items = [{"uid": site, "type": "site"} for site in sites]
                self.send(200, {"items": items, "total": len(items), "offset": 0})
            elif parts[1] in sites:
                self.send(200, {"uid": parts[1], "type": "site"})
            else:
                self.send(404, {"code": 404, "message": "not found"})
        else:
            self.send(404, {"code": 404, "message": f"not found: {url.path}"})

    def metrics(self, query: dict[str, list[str]]) -> None:
        unknown = sorted(set(query) - set(ARGS))
        if unknown:
            self.send(
                404,
                {
                    "code": "PGRST202",
                    "details": None,
                    "hint": None,
                    "message": "Could not find the function api.get_metrics("
                    + ", ".join(sorted(query))
                    + ") in the schema cache",
                },
            )
            return
        names = sorted(query)
        args = ", ".join(f"{n} => %s::{ARGS[n]}" for n in names)
        values = [query[n][-1] for n in names]
        conn = psycopg2.connect(self.server.dsn)
        try:
            with conn, conn.cursor() as cur:
                cur.execute(f"SET LOCAL ROLE {self.server.role}")
                cur.execute(
                    f"SELECT coalesce(json_agg(t), '[]')::text FROM api.get_metrics({args}) t",
                    values,
                )
                body = cur.fetchone()[0].encode()
        except psycopg2.Error as exc:
            diag = exc.diag
            self.send(
                http_status(exc.pgcode or "XX000"),
                {
                    "code": exc.pgcode,
                    "details": diag.message_detail,
                    "hint": diag.message_hint,
                    "message": diag.message_primary,
                },
            )
            return
        finally:
            conn.close()
        self.send_bytes(200, body)

    def send(self, status: int, doc: Any) -> None:
        self.send_bytes(status, json.dumps(doc).encode())

    def send_bytes(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn", required=True)
    p.add_argument("--role", required=True)
    p.add_argument("--catalog", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--nodes-per-cluster", type=int, default=4)
    args = p.parse_args()
    with open(args.catalog) as fh:
        catalog = json.load(fh)
    server = Adapter(("127.0.0.1", args.port), args.dsn, args.role, catalog, args.nodes_per_cluster)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    print(f"pg-adapter listening on http://{host}:{port}", flush=True)
    stop.wait()
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
