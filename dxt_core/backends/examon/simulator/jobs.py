"""The Examon server's job accounting endpoints, as ExamonHPC/examon serves them.

Upstream: ``web/examon-server/server.py`` (ExamonHPC/examon v0.3.1, Flask 1.1.1, Werkzeug
0.16, Python 2), routes ``/api/v1/examon/jobs/query`` (``get_jobs_test``) and
``/api/v2/examon/jobs/query`` (``get_jobs_test_v2``). What they do, and what this module does:

* The body is read with Flask's ``request.json``: ``None`` unless the Content-Type is
  ``application/json`` (or ``application/*+json``), a bare 400 on invalid JSON; a missing or
  falsy payload is ``abort(400)``. Both 400s are Werkzeug's HTML page.
* v1 does ``json.loads(request.json)`` outside its ``try``: the payload must be a JSON
  *string* holding the serialized examon-client ``Query``; an object there is a TypeError,
  answered 500 (Werkzeug's HTML page). v2 takes the object itself.
* ``query_builder`` reads ``groupby``, ``metrics``, ``tstart``, ``tstop``, ``tags`` and
  ``limit`` with ``query[key]``: a missing key (or a payload of the wrong type) raises inside
  the ``try``, whose ``except`` first logs the not-yet-assigned ``stmt``; the
  UnboundLocalError escapes and the answer is 500, not 400. ``aggrby`` and ``time_zone`` are
  never read.
* The statement is ``SELECT <cols|*> FROM <tables> WHERE (start_time, end_time) >= (T1,T1)
  AND (start_time, end_time) <= (T2,T2) ... LIMIT n ALLOW FILTERING``: Cassandra compares the
  tuples lexicographically, so a job is selected by its *start* time (``T1 <= start``, and
  ``start < T2`` or a job of zero length starting at ``T2``). Errors Cassandra raises while
  running it are answered 400 with ``jsonify(e.message)`` (a JSON string).
* The rows go through pandas: every record has every column (null when empty), an integer
  column holding a null is written as floats, timestamps as ``...T09:06:45.000Z``, ``/`` as
  ``\\/`` (``df.to_json(orient='records', date_format='iso')``). v1 answers
  ``jsonify(df_json)`` (a JSON string of that text, plus a newline), v2 the text itself.
* ``flask_gzip.py`` gzips 2xx answers of 500 bytes or more when ``Accept-Encoding`` holds
  ``gzip`` (level 6, no ``Vary``).

Simplifications: the Cassandra messages are modelled on the driver's wording
(``Error from server: code=2200 [Invalid query] message="..."``), not byte for byte, and the
``node`` tag (``cpus_alloc_layout CONTAINS KEY``) is refused as an undefined column, since
the simulated table has no such map.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Final

import orjson

from dxt_core.backends.examon.simulator.model import JOB_PERIOD_S, DataModel, JsonObj
from dxt_core.backends.examon.simulator.query import _Response

# Guards against an accidental "everything since 1970" query; Cassandra would time out.
_MAX_JOBS_PER_QUERY: Final = 250_000

HTML: Final = "text/html; charset=utf-8"
_WERKZEUG: Final = (
    '<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 3.2 Final//EN">\n'
    "<title>{code} {name}</title>\n<h1>{name}</h1>\n<p>{text}</p>\n"
)
# Werkzeug 0.16 src/werkzeug/exceptions.py: each class's name and description.
_TEXTS: Final = {
    400: (
        "Bad Request",
        "The browser (or proxy) sent a request that this server could not understand.",
    ),
    404: (
        "Not Found",
        "The requested URL was not found on the server. If you entered the URL manually "
        "please check your spelling and try again.",
    ),
    405: ("Method Not Allowed", "The method is not allowed for the requested URL."),
    500: (
        "Internal Server Error",
        "The server encountered an internal error and was unable to complete your request. "
        "Either the server is overloaded or there is an error in the application.",
    ),
}
_INT_LITERAL: Final = re.compile(r"-?[0-9]+")


def werkzeug_page(status: int, **headers: str) -> _Response:
    """Werkzeug 0.16's HTML error page for ``status`` (what ``abort`` and crashes answer)."""
    name, text = _TEXTS[status]
    body = _WERKZEUG.format(code=status, name=name, text=text).encode()
    return _Response(status, body, dict(headers), content_type=HTML, encoding="none")


def unauthorized() -> _Response:
    """Flask-HTTPAuth 3.3.0's answer to missing or wrong credentials."""
    return _Response(
        401,
        b"Unauthorized Access",
        {"WWW-Authenticate": 'Basic realm="Authentication Required"'},
        content_type=HTML,
        encoding="none",
    )


class _CqlError(Exception):
    """Cassandra refused the statement: answered 400 with the message as a JSON string."""


class _HandlerCrash(Exception):
    """The handler raised outside what it catches: answered 500 (Werkzeug's page)."""


def flask_json(raw: bytes, content_type: str | None) -> Any:
    """Werkzeug 0.16 ``request.json``: None for a non-JSON Content-Type.

    Raises:
        _BadJson: the body is not JSON (Flask answers a bare 400).
    """
    mimetype = (content_type or "").split(";", 1)[0].strip().lower()
    if not (
        mimetype == "application/json"
        or (mimetype.startswith("application/") and mimetype.endswith("+json"))
    ):
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise _BadJson from exc


class _BadJson(Exception):
    """The body is not valid JSON."""


def _fmt(value: Any) -> str:
    """``"{}".format(value)`` as Python 2 prints a JSON value into the CQL text."""
    if value is True or value is False:
        return str(value)
    if value is None:
        return "None"
    return str(value)


class JobsEndpoint:
    """``POST /api/v{1,2}/examon/jobs/query`` over a :class:`DataModel`."""

    def __init__(self, model: DataModel) -> None:
        self.model = model

    def answer(self, version: int, raw: bytes, content_type: str | None) -> _Response:
        try:
            payload = flask_json(raw, content_type)
        except _BadJson:
            return werkzeug_page(400)
        if not payload:
            return werkzeug_page(400)  # "QUERY: No payload. Response: 400"
        if version == 1:
            # ``json.loads(request.json)``, outside the handler's try.
            if not isinstance(payload, str):
                return werkzeug_page(500)  # TypeError: expected string or buffer
            try:
                query = json.loads(payload)
            except ValueError:
                return werkzeug_page(500)
        else:
            query = payload
        try:
            plan = _build(query)
        except _HandlerCrash:
            return werkzeug_page(500)
        try:
            records = self._execute(plan)
        except _CqlError as exc:
            body = json.dumps(str(exc), separators=(",", ":")) + "\n"  # jsonify(e.message)
            return _Response(400, body.encode(), content_type="application/json", encoding="none")
        text = _pandas_records_json(records)
        if version == 1:
            body = json.dumps(text.decode("ascii"), separators=(",", ":")) + "\n"
            return _Response(200, body.encode(), content_type="application/json", encoding="flask")
        return _Response(200, text, content_type="application/json", encoding="flask")

    def _execute(self, plan: _Statement) -> list[JsonObj]:
        if not plan.tables or len(plan.tables) > 1:
            raise _CqlError(f"line 1:{len('SELECT ')} mismatched input in {plan.text!r}")
        table = plan.tables[0]
        if table not in self.model.job_tables:
            raise _CqlError(
                f'Error from server: code=2200 [Invalid query] message="unconfigured table {table}"'
            )
        if plan.tstart is None and (plan.tstop is not None or plan.where):
            raise _CqlError(f"line 1: no viable alternative at input 'AND' in {plan.text!r}")
        bounds = []
        for what in (plan.tstart, plan.tstop):
            if what is not None and not _INT_LITERAL.fullmatch(what):
                raise _CqlError(f"line 1: no viable alternative at input {what!r}")
            bounds.append(int(what) if what is not None else None)
        t1, t2 = bounds
        if plan.limit is not None and not (
            _INT_LITERAL.fullmatch(plan.limit) and int(plan.limit) > 0
        ):
            raise _CqlError(f"line 1: mismatched input {plan.limit!r} expecting INTEGER")
        columns = set(self.model.job(0))
        for name in [*(plan.columns or []), *(k for k, _ in plan.where)]:
            if name not in columns:
                raise _CqlError(
                    'Error from server: code=2200 [Invalid query] message="Undefined column '
                    f'name {name}"'
                )
        period_ms = JOB_PERIOD_S * 1000
        lo = t1 if t1 is not None else 0
        if self.model.config.data_start_ms is not None:
            lo = max(lo, self.model.config.data_start_ms)
        now_ms = int(time.time() * 1000)
        hi = now_ms if t2 is None else min(t2, now_ms)
        first, last = -(-lo // period_ms), hi // period_ms
        if last - first > _MAX_JOBS_PER_QUERY:
            raise _CqlError(
                "Error from server: code=1200 [Coordinator node timed out waiting for replica "
                'nodes\' responses] message="Operation timed out - received only 0 responses."'
            )
        out: list[JsonObj] = []
        for k in range(first, last + 1):
            start, end = self.model.job_span_ms(k)
            if end > now_ms:
                continue  # not finished: not in the accounting table yet
            # (start_time, end_time) >= (T1, T1) AND (start_time, end_time) <= (T2, T2)
            if t1 is not None and (start, end) < (t1, t1):
                continue
            if t2 is not None and (start, end) > (t2, t2):
                continue
            record = self.model.job(k)
            if not all(str(record.get(key)) == value for key, value in plan.where):
                continue
            if plan.columns:
                record = {c: record[c] for c in plan.columns}
            out.append(record)
            if plan.limit is not None and len(out) >= int(plan.limit):
                break
        return out


class _Statement:
    """What ``query_builder`` put into the CQL text."""

    def __init__(self) -> None:
        self.columns: list[str] | None = None
        self.tables: list[str] = []
        self.tstart: str | None = None
        self.tstop: str | None = None
        self.where: list[tuple[str, str]] = []
        self.limit: str | None = None
        self.text = ""


def _build(query: Any) -> _Statement:
    """``query_builder(query)`` of the upstream server, raising :class:`_HandlerCrash` where
    the Python 2 code raises (every key is read with ``query[key]``)."""
    try:
        return _build_or_raise(query)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        raise _HandlerCrash from exc


def _build_or_raise(query: Any) -> _Statement:
    if not isinstance(query, dict):
        raise TypeError("string indices must be integers")
    st = _Statement()
    groupby = query["groupby"]  # qb_get_columns is called first
    if groupby:
        spec = groupby[0] if isinstance(groupby, list) else groupby
        if not isinstance(spec, dict):
            raise TypeError("groupby entry is not a dict")
        tags = spec["tags"]
        if len(tags) > 0:
            st.columns = [_join_item(t) for t in tags]
    metrics = query["metrics"]
    if metrics:
        st.tables = ",".join(_join_item(m) for m in metrics).split(",")
    if query["tstart"]:
        st.tstart = _fmt(query["tstart"])
    if query["tstop"]:
        st.tstop = _fmt(query["tstop"])
    tags = query["tags"]
    if tags and len(tags) > 0:
        if not isinstance(tags, dict):
            raise AttributeError("'list' object has no attribute 'iteritems'")
        for key, values in tags.items():
            if key.lower() == "node":
                # cpus_alloc_layout CONTAINS KEY '<node>': not a column of the simulated table.
                st.where.extend(("cpus_alloc_layout", _fmt(v)) for v in values)
            else:
                st.where.extend((key, _fmt(v)) for v in values)
    if query["limit"]:
        st.limit = _fmt(query["limit"])
    st.text = (
        f"SELECT {','.join(st.columns) if st.columns else '*'} FROM {','.join(st.tables)}"
        + (f" WHERE (start_time, end_time) >= ({st.tstart},{st.tstart})" if st.tstart else "")
        + (f" AND (start_time, end_time) <= ({st.tstop},{st.tstop})" if st.tstop else "")
        + "".join(f" AND {k} = '{v}'" for k, v in st.where)
        + (f" LIMIT {st.limit}" if st.limit else "")
        + " ALLOW FILTERING"
    )
    return st


def _join_item(item: Any) -> str:
    if not isinstance(item, str):
        raise TypeError("sequence item 0: expected string")  # ','.join in Python 2
    return item


def _pandas_records_json(records: list[JsonObj]) -> bytes:
    """``pd.DataFrame(rows).to_json(orient='records', date_format='iso')`` of the rows."""
    if not records:
        return b"[]"
    columns = list(records[0])
    floats = {
        c
        for c in columns
        if any(r[c] is None for r in records)
        and all(
            r[c] is None or (isinstance(r[c], int) and not isinstance(r[c], bool)) for r in records
        )
        and any(r[c] is not None for r in records)
    }
    if floats:  # an int64 column with a null becomes float64 in the DataFrame
        records = [
            {c: float(v) if c in floats and v is not None else v for c, v in r.items()}
            for r in records
        ]
    # pandas' ujson escapes "/" (escape_forward_slashes); "/" only occurs inside strings.
    return orjson.dumps(records).replace(b"/", b"\\/")
