"""How KairosDB 1.2.2 prints a double: ``JSONWriter.value(double)`` ->
``JSONObject.numberToString`` of org.json chargebee-1.0 (chargebee/JSON-java
``src/main/java/org/json/JSONObject.java``) on top of Java 8's ``Double.toString``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dxt_core.backends.examon.simulator.query import _encode_doubles, org_json_number


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (24.0, "24"),
        (100.0, "100"),
        (-2.5, "-2.5"),
        (0.1 + 0.2, "0.30000000000000004"),
        (0.0, "0"),
        (-0.0, "-0"),
        (9999999.0, "9999999"),
        (1.0e7, "1.0E7"),
        (12345678.9, "1.23456789E7"),
        (0.001, "0.001"),
        (1.0e-4, "1.0E-4"),
        (1.5e-7, "1.5E-7"),
    ],
)
def test_org_json_number(value: float, text: str) -> None:
    assert org_json_number(value) == text


def test_non_finite_numbers_are_refused() -> None:
    # JSONObject.testValidity; KairosDB's DoubleDataPoint throws before writing one.
    for value in (math.nan, math.inf):
        with pytest.raises(ValueError):
            org_json_number(value)


def test_the_fast_encoder_agrees_with_the_rule() -> None:
    ts = np.arange(6, dtype=np.int64)
    for values in (
        np.array([24.0, 24.5, 0.1 + 0.2, 3000.0, 0.001, 9999999.0]),
        np.array([1.0e7, 2.5e-5, 0.0, -0.0, 1.0, 12345678.9]),
    ):
        pairs = zip(ts.tolist(), values.tolist(), strict=True)
        expected = ",".join(f"[{t},{org_json_number(v)}]" for t, v in pairs)
        assert _encode_doubles(ts, values) == f"[{expected}]".encode()
