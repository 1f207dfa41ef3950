"""What an S3 archive leaves in its bucket besides the days (moto_server): unfinished uploads
of interrupted runs, and on a versioned bucket the versions each commit adds (the figures of
docs/archive.md, "Versioned buckets and lifecycle rules")."""

from __future__ import annotations

import collections
import json
import logging
import re

import pytest

from tests.conftest import ROOT
from tests.integration.s3.test_s3_permissions import DAY, commit_day

pytestmark = [pytest.mark.integration]


def test_the_abort_of_a_killed_runs_uploads_is_a_warning_with_a_count(
    bucket, s3_server, s3_env, caplog
):
    c = s3_server.client()
    for _ in range(2):  # two killed runs of the day
        c.create_multipart_upload(Bucket=bucket, Key=f"p/toy/m/{DAY}.csv.gz")
    with caplog.at_level(logging.WARNING, logger="dxt_core.store.s3"):
        commit_day(f"s3://{bucket}/p", 10, "1")
    said = [r.message for r in caplog.records if "unfinished multipart" in r.message]
    assert len(said) == 1 and "aborted 2 unfinished multipart upload(s)" in said[0]
    assert f"s3://{bucket}/p/toy/m/{DAY}" in said[0]
    assert "AbortIncompleteMultipartUpload" in said[0]
    assert c.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def _versions(client, bucket: str) -> collections.Counter[tuple[str, str]]:
    """(key, current | noncurrent | delete marker) -> how many."""
    r = client.list_object_versions(Bucket=bucket)
    n: collections.Counter[tuple[str, str]] = collections.Counter()
    for v in r.get("Versions", []):
        n[(v["Key"], "current" if v["IsLatest"] else "noncurrent")] += 1
    for m in r.get("DeleteMarkers", []):
        n[(m["Key"], "delete marker")] += 1
    return n


def test_what_each_commit_leaves_in_a_versioned_bucket(bucket, s3_server, s3_env):
    c = s3_server.client()
    c.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    root = f"s3://{bucket}/p"
    lock, index = f"p/.dxt/locks/toy/m/{DAY}.lock", "p/.dxt/index/toy/m.json"
    manifest, data = f"p/toy/m/{DAY}.manifest.json", f"p/toy/m/{DAY}.csv.gz"
    before = _versions(c, bucket)
    for n in (1, 2):  # a day, then its byte-identical rerun
        commit_day(root, 10, "1")
        now = _versions(c, bucket)
        # the lock: one noncurrent version and a delete marker per commit
        assert now[(lock, "noncurrent")] == now[(lock, "delete marker")] == n
        # the index object: rewritten by each commit
        assert now[(index, "noncurrent")] == n - 1
        # the manifest: the "writing" marker, and the manifest it replaced
        assert now[(manifest, "noncurrent")] == 2 * n - 1
        assert now[(data, "noncurrent")] == 0
        before = now
    commit_day(root, 10, "2", replace=True)
    now = _versions(c, bucket)
    # the old bytes twice: dxt's copy in .versions/, and S3's noncurrent version
    assert now[(data, "noncurrent")] == 1
    assert any(k.startswith(f"p/toy/m/.versions/{DAY}.csv.gz.prev-") for k, _ in now)
    assert now[(lock, "delete marker")] == before[(lock, "delete marker")] + 1


def test_the_lifecycle_rules_of_the_docs_are_taken_by_the_server(bucket, s3_server):
    text = (ROOT / "docs" / "archive.md").read_text()
    block = re.search(r"```json\n(\{\"Rules\".*?)```", text, re.S)
    assert block, "docs/archive.md no longer shows the lifecycle rules"
    rules = json.loads(block.group(1))
    c = s3_server.client()
    c.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration=rules)
    got = c.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert {r["ID"] for r in got} == {"dxt-abort-uploads", "dxt-internal-versions"}
