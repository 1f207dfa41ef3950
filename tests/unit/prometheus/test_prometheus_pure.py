"""The pure parts of the Prometheus backend: refusal texts, selectors, splitting, catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from dxt_core.backends.prometheus.catalog import from_names, load_catalog
from dxt_core.backends.prometheus.connection import SPEC, PrometheusConnection
from dxt_core.backends.prometheus.policy import too_large
from dxt_core.backends.prometheus.promql import (
    api_seconds,
    selector_of,
    split_label,
    with_matcher,
)
from dxt_core.backends.prometheus.source import ServerInfo
from dxt_core.errors import CatalogError, ConfigError

# Answers measured on the real servers (tests/integration/prometheus/test_limits.py)
PROM_MAX_SAMPLES = (
    b'{"status":"error","errorType":"execution","error":"query processing would load too '
    b'many samples into memory in query execution"}'
)
VM_SERIES = (
    b'remoteAddr: "127.0.0.1:52936"; requestURI: /api/v1/export?...: error when searching '
    b"tsids: the number of matching timeseries exceeds 2; either narrow down the search or "
    b"increase -search.max* command-line flag values at vmselect"
)
VM_SAMPLES = (
    b'{"status":"error","errorType":"422","error":"...: cannot select more than '
    b'-search.maxSamplesPerQuery=1000 samples; possible solutions: ..."}'
)


def test_refusals_that_split() -> None:
    assert too_large(422, PROM_MAX_SAMPLES)
    assert too_large(400, VM_SERIES)
    assert too_large(422, VM_SAMPLES)
    assert too_large(503, b'{"status":"error","errorType":"timeout","error":"query timed out'
                     b' in expression evaluation"}')  # fmt: skip
    # a bad query, or a 503 of a server that is not ready, is not "too large"
    assert not too_large(400, b'{"status":"error","errorType":"bad_data","error":"parse error"}')
    assert not too_large(503, b"Service Unavailable")
    assert not too_large(200, PROM_MAX_SAMPLES)


def test_range_ends_by_server() -> None:
    assert not ServerInfo("prometheus", "2.42.0+ds").left_open
    assert not ServerInfo("prometheus", "").left_open
    assert ServerInfo("prometheus", "3.0.1").left_open
    assert ServerInfo("prometheus", "v3.5.0").left_open
    assert ServerInfo("victoriametrics", "").left_open
    # the connection's range_ends wins over the kind and version
    assert ServerInfo("prometheus", "", "left-open").left_open
    assert not ServerInfo("victoriametrics", "1.79.5", "closed").left_open
    assert ServerInfo("prometheus", "2.42.0", "auto").left_open is False


def test_selectors_narrowed_by_a_label() -> None:
    assert with_matcher("m", "instance", ["a:1", "b.c"]) == 'm{instance=~"a:1|b\\\\.c"}'
    assert with_matcher('m{job="x"}', "node", ["n1"]) == 'm{job="x",node=~"n1"}'
    assert with_matcher('{job="x",}', "node", ["", "n2"]) == '{job="x",node=~"|n2"}'
    assert with_matcher("{}", "a", ['q"uote']) == '{a=~"q\\"uote"}'
    # a raw newline, carriage return or tab is a PromQL parse error inside "..."
    assert with_matcher("m", "a", ["x\ny\tz"]) == 'm{a=~"x\\ny\\tz"}'
    # a label or metric name that is not a classic one (Prometheus 3's UTF-8 names) is quoted
    assert with_matcher("{}", "k8s.pod.name", ["p"]) == '{"k8s.pod.name"=~"p"}'
    assert selector_of("http.server.duration") == '{__name__="http.server.duration"}'
    assert selector_of("node_load1") == "node_load1"


def test_split_label_picks_the_most_telling_label() -> None:
    series = [{"__name__": "m", "job": "j", "node": f"n{i}"} for i in range(3)]
    series.append({"__name__": "m", "job": "j"})
    assert split_label(series) == ("node", ["", "n0", "n1", "n2"])
    assert split_label([{"__name__": "m", "a": "1"}]) == (None, [])


def test_numbers_and_times() -> None:
    assert api_seconds(1711922399999) == "1711922399.999"
    assert api_seconds(5) == "0.005"


def test_catalog(tmp_path: Path) -> None:
    p = tmp_path / "c.txt"
    p.write_text('# c\n\nnode_load1\ngpu = {__name__=~"DCGM_.*", job="dcgm"}\n')
    entries = load_catalog(p)
    assert [(e.name, e.selector, e.is_metric) for e in entries] == [
        ("node_load1", "node_load1", True),
        ("gpu", '{__name__=~"DCGM_.*", job="dcgm"}', False),
    ]
    p.write_text("node_load1\nnode load\n")
    with pytest.raises(CatalogError) as err:
        load_catalog(p)
    assert f"{p}, line 2" in str(err.value)
    # a line holding ": " is quoted whole (the message is not cut at it)
    p.write_text("node_load1\nfoo: bar\n")
    with pytest.raises(CatalogError) as err:
        load_catalog(p)
    assert f"{p}, line 2: 'foo: bar' is neither a metric name" in str(err.value)
    p.write_text('x = {job="j"\n')
    with pytest.raises(CatalogError, match=r"line 1: .*does not end with the \} that closes"):
        load_catalog(p)
    p.write_text("a\na\n")
    with pytest.raises(CatalogError, match="already on line 1"):
        load_catalog(p)
    with pytest.raises(ConfigError):
        from_names("ok,not ok")
    with pytest.raises(ConfigError, match="names no metric"):  # it archived 0 units, rc 0
        from_names(" , ")
    assert from_names("") == from_names(None) == []  # not given
    # a name given twice made two units of each day: the second failed on the first's lock,
    # "being archived by pid <its own>", exit 1
    with pytest.raises(ConfigError, match="names 'up' twice: name each once"):
        from_names("up,node_load1,up")


def test_connection_extras() -> None:
    conn = SPEC.from_fields(
        conn_id="c", host="vm.example.org", port=8428, extra={"flavor": "victoriametrics"}
    )
    assert isinstance(conn, PrometheusConnection)
    assert conn.url == "http://vm.example.org:8428" and conn.flavor == "victoriametrics"
    with pytest.raises(ConfigError, match="extra 'flavor' must be one of"):
        SPEC.from_fields(conn_id="c", host="h", extra={"flavor": "thanos"})
    with pytest.raises(ConfigError, match="unknown"):
        SPEC.from_fields(conn_id="c", host="h", extra={"flavour": "prometheus"})
    with pytest.raises(ConfigError, match="needs the token"):
        SPEC.from_fields(conn_id="c", host="h", extra={"auth": "bearer"})
    assert "s3cret" not in repr(SPEC.from_fields(conn_id="c", host="h", password="s3cret"))
    assert SPEC.from_fields(conn_id="c", host="h").in_flight == 0  # chosen by the server
    assert SPEC.from_fields(conn_id="c", host="h", extra={"in_flight": "3"}).in_flight == 3
    with pytest.raises(
        ConfigError, match=r'in_flight must be 0 .* not -1 .*"in_flight", CLI --in-flight'
    ):
        SPEC.from_fields(conn_id="c", host="h", extra={"in_flight": -1})
    with pytest.raises(ConfigError, match="extra 'in_flight' must be a number"):
        SPEC.from_fields(conn_id="c", host="h", extra={"in_flight": "two"})
    assert SPEC.from_fields(conn_id="c", host="h").compression == "auto"
    assert (
        SPEC.from_fields(conn_id="c", host="h", extra={"compression": "none"}).compression == "none"
    )
    with pytest.raises(ConfigError, match="extra 'compression' must be one of auto, gzip, none"):
        SPEC.from_fields(conn_id="c", host="h", extra={"compression": "zstd"})
    with pytest.raises(ConfigError, match=r"compression must be one of .*CLI --compression"):
        PrometheusConnection("http://h", compression="br")
