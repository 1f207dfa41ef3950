"""Asset URIs of groups whose names hold URI delimiters (Airflow drops a URI's query and
fragment: plugins ``a?b``, ``a#b`` and ``a`` were one asset URI)."""

from __future__ import annotations

import pytest


def test_each_group_has_its_own_uri_and_plain_names_keep_theirs():
    # imported here, not at collection: importing Airflow takes about 1.5 s of CPU, which
    # every test worker would pay while collecting, for this one test
    pytest.importorskip("airflow.sdk")
    from dxt_core.airflow.assets import archive_asset

    groups = ["a", "a?b", "a#b", "a%3Fb", "a%b", "ipmi_pub", "job:rate5m"]
    assets = [archive_asset("examon", g) for g in groups]
    assert len({a.uri for a in assets}) == len(groups), [a.uri for a in assets]
    assert archive_asset("examon", "ipmi_pub").uri == "dxt-archive://examon/ipmi_pub"
    assert archive_asset("prometheus", "job:rate5m").uri == "dxt-archive://prometheus/job:rate5m"
    assert archive_asset("examon", "a?b").name == "dxt-archive/examon/a?b"
