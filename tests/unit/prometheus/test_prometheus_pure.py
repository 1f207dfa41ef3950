"""The pure parts of the Prometheus backend: refusal texts, selectors, splitting, catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from dxt_core.backends.prometheus.catalog import from_names, load_catalog
from dxt_core.backends.prometheus.connection import SPEC, PrometheusConnection
from dxt_core.backends.prometheus.source import (
    ServerInfo,
    _num,
    _seconds,
    _split_label,
    too_large,
    with_matcher,
)
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


def test_selectors_narrowed_by_a_label() -> None:
    assert with_matcher("m", "instance", ["a:1", "b.c"]) == 'm{instance=~"a:1|b\\\\.c"}'
    assert with_matcher('m{job="x"}', "node", ["n1"]) == 'm{job="x",node=~"n1"}'
    assert with_matcher('{job="x",}', "node", ["", "n2"]) == '{job="x",node=~"|n2"}'
    assert with_matcher("{}", "a", ['q"uote']) == '{a=~"q\\"uote"}'


def test_split_label_picks_the_most_telling_label() -> None:
    series = [{"__name__": "m", "job": "j", "node": f"n{i}"} for i in range(3)]
    series.append({"__name__": "m", "job": "j"})
    assert _split_label(series) == ("node", ["", "n0", "n1", "n2"])
    assert _split_label([{"__name__": "m", "a": "1"}]) == (None, [])


def test_numbers_and_times() -> None:
    assert _seconds(1711922399999) == "1711922399.999"
    assert _seconds(5) == "0.005"
    assert _num("5") == 5 and isinstance(_num("5"), int)
    assert _num(21.2) == 21.2 and _num("+Inf") == float("inf")
    assert _num("NaN") != _num("NaN")  # NaN stays a float NaN


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
    p.write_text("a\na\n")
    with pytest.raises(CatalogError, match="already on line 1"):
        load_catalog(p)
    with pytest.raises(ConfigError):
        from_names("ok,not ok")


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


def test_server_digits_kept_as_raw_points() -> None:
    from dxt_core.backends.prometheus.source import _cut_arrays, _prom_raw, _vm_raw
    from dxt_core.records import RawPoints

    # as Prometheus 2.42 answers (measured): seconds, values as text
    answer = (
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":'
        b'"m","node":"n1"},"values":[[1711922385,"21.13"],[1711922400,"5"]]}]}}'
    )
    skeleton, arrays = _cut_arrays(answer, b'"values":[', b"]]", 1)
    assert b'"values":[]' in skeleton and len(arrays) == 1
    points = _prom_raw(arrays[0])
    assert isinstance(points, RawPoints)
    assert list(points) == [[1711922385000, 21.13], [1711922400000, 5]]
    assert points.tokens == [b"1711922385000", b"21.13", b"1711922400000", b"5"]
    # NaN, infinities, exponents and fractional seconds take the decoding path
    assert _prom_raw(b'[1711922385,"NaN"]') is None
    assert _prom_raw(b'[1711922385,"1e-07"]') is None
    assert _prom_raw(b'[1711922385.5,"1"]') is None
    # as VictoriaMetrics 1.79 exports (measured)
    line = (
        b'{"metric":{"__name__":"m","job":"node"},"values":[21.2,21.27,21],'
        b'"timestamps":[1711922400000,1711922415000,1711922430000]}'
    )
    skeleton, values = _cut_arrays(line, b'"values":[', b"]", 0)
    skeleton, stamps = _cut_arrays(skeleton, b'"timestamps":[', b"]", 0)
    assert skeleton == b'{"metric":{"__name__":"m","job":"node"},"values":[],"timestamps":[]}'
    vm = _vm_raw(stamps[0], values[0])
    assert isinstance(vm, RawPoints) and vm.tokens[1::2] == [b"21.2", b"21.27", b"21"]
