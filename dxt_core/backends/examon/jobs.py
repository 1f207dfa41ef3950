"""Examon job tables (``job_info_marconi100``): not in KairosDB but served by the Examon
server's jobs endpoint, one JSON answer per day."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import orjson

from dxt_core import masking
from dxt_core.backends.examon.client import KairosDBClient, rate_limited
from dxt_core.backends.examon.policy import QueryCounts
from dxt_core.errors import QueryRejected, SourceError, SourceUnavailable
from dxt_core.http import HttpClient, RequestStats
from dxt_core.records import Record
from dxt_core.windows import Window

log = masking.logger("dxt_core.kairosdb")

#: How a job table's source count is taken.
JOBS_COUNT_METHOD = "Examon jobs query (the jobs service has no count: the records)"


class ExamonJobs(KairosDBClient):
    """The Examon jobs service, beside KairosDB (the same credentials)."""

    def jobs_http(self) -> HttpClient:
        """The jobs service's HTTP client (the connection's ``jobs_url``, else its default),
        made once and closed with the source; the same connection: its credentials (also
        those in the URL) go along."""
        if self._jobs_http is None:
            with self._lock:  # threads may share a source (the CLI's units)
                if self._jobs_http is None:
                    jobs_url = self.conn.jobs_url or self.conn.default_jobs_url()
                    self._jobs_http = self._http.sibling(jobs_url)
        return self._jobs_http

    def fetch_jobs(
        self,
        table: str,
        window: Window,
        stats: RequestStats | None = None,
        counts: QueryCounts | None = None,
    ) -> list[Record]:
        """Job records of ``table`` whose start time falls in ``window`` (half-open).

        Asked as examon-client 0.4 asks (``jobsclient.py`` ``query_jobs``): the serialized
        ``Query`` (``tstart``, ``tstop`` in UTC epoch ms, ``metrics: [table]``, ...), as a JSON
        string for the ``v1`` handler, as the object itself for ``v2``. The Examon server
        selects on ``(start_time, end_time)`` tuples with both ends inclusive
        (``web/examon-server/server.py`` ``query_builder``), so a job of zero length starting
        at the next midnight comes back too: it is dropped here (and counted), to be
        archived with the next day, so each job lands in exactly one day.
        """
        jobs_http = self.jobs_http()
        api = self.conn.jobs_api
        path = f"api/{api}/examon/jobs/query"
        url = jobs_http.url(path)
        query = {
            "tstart": window.start_ms,
            "tstop": window.end_ms,
            "metrics": [table],
            "tags": None,
            "groupby": [{"name": "tag", "tags": []}],  # every column, as SELECT('*') sends
            "aggrby": None,
            "limit": None,
            "time_zone": self.conn.time_zone,
        }
        body: Any = json.dumps(query) if api == "v1" else query
        try:
            doc = rate_limited(jobs_http.post_json, path, body, stats=stats)
        except (QueryRejected, SourceUnavailable) as exc:
            if exc.status in (404, 405, 500):
                other = "v2" if api == "v1" else "v1"
                raise QueryRejected(
                    f"the Examon jobs service refused the {api} query of {table!r} ({exc}); "
                    f"if it runs the other handler, set jobs_api={other} (CLI --jobs-api "
                    f'{other}, connection extra "jobs_api": "{other}")',
                    url=url,
                    status=exc.status,
                ) from exc
            raise
        if isinstance(doc, str):  # v1: jsonify(df.to_json(...)), a JSON string of the list
            try:
                doc = orjson.loads(doc)
            except orjson.JSONDecodeError as exc:
                raise SourceError(f"jobs answer is not a JSON list ({exc})", url=url) from exc
        if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
            raise SourceError("jobs answer is not a list of job records", url=url)
        kept: list[Record] = []
        for record in doc:
            start = _job_start_ms(record, url)
            if start is None or window.start_ms <= start < window.end_ms:
                kept.append(record)
        if len(kept) < len(doc):
            log.info(
                "%s: dropped %d jobs starting outside [%s, %s)",
                table,
                len(doc) - len(kept),
                window.start.isoformat(),
                window.end.isoformat(),
            )
            if counts is not None:
                counts.dropped_outside_window += len(doc) - len(kept)
        return kept


def _job_start_ms(record: Record, url: str) -> int | None:
    value = record.get("start_time")
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)  # pandas' default epoch ms
    try:
        when = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise SourceError(
            f"job {record.get('job_id')!r}: start_time {value!r} is not an ISO time", url=url
        ) from exc
    if when.tzinfo is None:  # Cassandra timestamps are UTC
        when = when.replace(tzinfo=dt.UTC)
    return round(when.timestamp() * 1000)
