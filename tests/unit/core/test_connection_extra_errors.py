"""Connection extras are refused, not bent, and the error names the connection and the
extra: an int extra that is not whole (in_flight=2.5 was cut to 2), a timeout that is not
finite (inf was accepted), a time zone or jobs URL that is wrong (the error named neither the
connection nor the extra)."""

from __future__ import annotations

import pytest

from dxt_core.backends.examon.connection import SPEC as EXAMON
from dxt_core.backends.prometheus.connection import SPEC as PROMETHEUS
from dxt_core.connection import Extra
from dxt_core.errors import ConfigError


@pytest.mark.parametrize("value", [2.5, "2.5", 0.1])
def test_an_int_extra_that_is_not_whole_is_refused(value):
    with pytest.raises(ConfigError) as err:
        PROMETHEUS.from_fields(conn_id="prom", host="h", extra={"in_flight": value})
    assert str(err.value) == (
        f"connection 'prom': extra 'in_flight' must be a whole number, not {value!r}"
    )


@pytest.mark.parametrize("value", [3, "3", 3.0, " 3 "])
def test_an_int_extra_that_is_whole_is_kept(value):
    conn = PROMETHEUS.from_fields(conn_id="prom", host="h", extra={"in_flight": value})
    assert conn.in_flight == 3 and type(conn.in_flight) is int


@pytest.mark.parametrize("value", ["inf", float("inf"), "-inf", float("nan"), "NaN"])
def test_a_number_extra_that_is_not_finite_is_refused(value):
    with pytest.raises(ConfigError, match=r"^connection 'prom': extra 'timeout' must be a finite"):
        PROMETHEUS.from_fields(conn_id="prom", host="h", extra={"timeout": value})


def test_a_boolean_is_not_a_number():
    with pytest.raises(ConfigError, match=r"extra 'timeout' must be a number, not True"):
        PROMETHEUS.from_fields(conn_id="prom", host="h", extra={"timeout": True})
    assert PROMETHEUS.from_fields(conn_id="p", host="h", extra={"timeout": "7.5"}).timeout_s == 7.5


def test_a_huge_whole_number_stays_exact():
    big = "123456789012345678901"
    assert Extra("n", int).parse(big, "c") == int(big)


@pytest.mark.parametrize("spec", [EXAMON, PROMETHEUS])
def test_a_bad_time_zone_extra_names_the_connection_and_the_extra(spec):
    conn_id = f"{spec.backend}_default"
    with pytest.raises(ConfigError) as err:
        spec.from_fields(conn_id=conn_id, host="h", extra={"time_zone": "Mars/Olympus"})
    assert str(err.value).startswith(
        f"connection {conn_id!r}: extra 'time_zone' (--tz on the command line): "
        "unknown time zone 'Mars/Olympus': use an IANA name"
    )


def test_a_bad_examon_jobs_url_names_the_connection_and_the_extra():
    with pytest.raises(ConfigError) as err:
        EXAMON.from_fields(
            conn_id="examon_default", host="h", extra={"jobs_url": "ftp://jobs:s3cret@h:5000"}
        )
    message = str(err.value)
    assert message.startswith(
        "connection 'examon_default': extra 'jobs_url' (--jobs-url on the command line): "
        "bad Examon jobs URL"
    )
    assert "s3cret" not in message
    good = EXAMON.from_fields(conn_id="e", host="h", extra={"jobs_url": "http://h:5000/"})
    assert good.jobs_url == "http://h:5000"
