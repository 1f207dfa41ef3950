"""dxt_collectd_es under Airflow: two days with `airflow dags test` against noida-db, files +
manifests checked, then a rerun of a day gives the same files."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from dxt_core.archive import Archive, DayKey, sha256_file
from dxt_core.backends.collectd_es.simulator import bulk_load
from dxt_core.backends.collectd_es.tokio_hdf5 import read_tokio_dataset
from tests.airflow.conftest import airflow, base_env, fresh_home
from tests.noida_fixtures import sample_hits
from tests.unit.collectd_es.test_collectd_es_cells import SAMPLE_HDF5

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

DAYS = (dt.date(2017, 12, 13), dt.date(2017, 12, 14))
# `airflow dags test DAG D` makes a manual run of logical date D: it archives day D, as every
# run without the day param does (dxt_core.airflow.runs).
TEST_DATE = {d: d.isoformat() for d in DAYS}


@pytest.fixture(scope="module")
def es_two_days(noida_es):
    """The sample hour on 2017-12-13 (loaded by the session) and a copy one day later,
    with bb1's documents left out (so the two days differ)."""
    shifted = []
    for h in sample_hits():
        s = dict(h["_source"])
        if s["hostname"] == "bb1":
            continue
        t = dt.datetime.fromisoformat(s["@timestamp"]) + dt.timedelta(days=1)
        s["@timestamp"] = t.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        shifted.append(
            {"_index": "cori-collectd-2017.12.14", "_id": h["_id"] + "-d2", "_source": s}
        )
    bulk_load(noida_es.url, shifted)
    return noida_es.url, len(shifted)


def dag_env(home: Path, archive: Path, url: str) -> dict[str, str]:
    env = base_env(home, archive, url, None)
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    env.update(
        {
            "AIRFLOW_CONN_ELASTICSEARCH_DEFAULT": json.dumps(
                {
                    "conn_type": "collectd_es",
                    "host": host,
                    "port": int(port),
                    "schema": "http",
                    "login": "reader",
                    "password": "not-a-real-secret",
                    "extra": {"index": "cori-collectd-*", "host_prefix": "bb"},
                }
            ),
            "DXT_COLLECTD_ES_SETTLE_SECONDS": "0",
            "DXT_COLLECTD_ES_RETRIES": "0",
            "DXT_COLLECTD_ES_NUM_NODES": "16",
            "DXT_COLLECTD_ES_PAGE_SIZE": "1000",
        }
    )
    return env


def test_two_days_then_identical_rerun(migrated_home, tmp_path, es_two_days):
    url, day2_docs = es_two_days
    archive_dir = tmp_path / "archive"
    env = dag_env(fresh_home(migrated_home, tmp_path / "home"), archive_dir, url)
    for day in DAYS:
        out = airflow(env, "dags", "test", "dxt_collectd_es", TEST_DATE[day])
        assert "not-a-real-secret" not in out.stdout + out.stderr
    archive = Archive(archive_dir)
    expected_rows = {DAYS[0]: 7038, DAYS[1]: day2_docs}
    for day in DAYS:
        key = DayKey("collectd_es", ("disk",), day)
        assert archive.status(key, verify=True) == ("archived", "")
        m = archive.read_manifest(key)
        assert m["rows"] == expected_rows[day]
        assert m["source_url"] == url and "not-a-real-secret" not in json.dumps(m)
        assert m["window"] == {
            "start": f"{day.isoformat()}T00:00:00+00:00",
            "end": f"{(day + dt.timedelta(days=1)).isoformat()}T00:00:00+00:00",
        }
        assert m["software"]["name"] == "dxt-archive" and m["export"]["mode"] == "pit"
        files = {f["format"]: f for f in m["files"]}
        assert set(files) == {"jsonl", "hdf5"}
        for f in files.values():
            path = archive.directory(key) / f["file"]
            assert path.stat().st_size == f["bytes"] and sha256_file(path) == f["sha256"]
        jsonl = archive.data_path(key, "jsonl.gz")
        assert len(gzip.decompress(jsonl.read_bytes()).splitlines()) == expected_rows[day]
        for family in ("cpu", "memory"):  # the sample has no such documents
            fk = DayKey("collectd_es", (family,), day)
            assert archive.status(fk) == ("empty", "")
            assert not archive.data_path(fk, "hdf5").exists()
    # the day files hold the sample hour at rows 08:00-09:00 (2880..3240 at 10 s)
    ref_cols, ref, _ = read_tokio_dataset(SAMPLE_HDF5, "datatargets/readrates")
    cols, day1, _ = read_tokio_dataset(
        archive.data_path(DayKey("collectd_es", ("disk",), DAYS[0]), "hdf5"),
        "datatargets/readrates",
    )
    assert cols == ref_cols and day1.shape == (8640, 64)
    np.testing.assert_allclose(day1[2880:3240], ref, rtol=1e-12)
    assert np.array_equal(np.signbit(day1[2880:3240]), np.signbit(ref))
    assert np.signbit(day1[:2880]).all() and np.signbit(day1[3240:]).all()
    cols2, _, _ = read_tokio_dataset(
        archive.data_path(DayKey("collectd_es", ("disk",), DAYS[1]), "hdf5"),
        "datatargets/readrates",
    )
    assert cols2 == [c for c in ref_cols if not c.startswith("bb1:")]

    # a rerun of day 1 (fresh Airflow home, same archive) rewrites the same data
    key = DayKey("collectd_es", ("disk",), DAYS[0])
    before_jsonl = archive.data_path(key, "jsonl.gz").read_bytes()
    env2 = dag_env(fresh_home(migrated_home, tmp_path / "home2"), archive_dir, url)
    airflow(env2, "dags", "test", "dxt_collectd_es", TEST_DATE[DAYS[0]])
    assert archive.data_path(key, "jsonl.gz").read_bytes() == before_jsonl
    _, again, _ = read_tokio_dataset(archive.data_path(key, "hdf5"), "datatargets/readrates")
    assert np.array_equal(again, day1) and np.array_equal(np.signbit(again), np.signbit(day1))
    assert archive.status(key, verify=True) == ("archived", "")
    assert not list(archive.directory(key).glob(".*.tmp"))
