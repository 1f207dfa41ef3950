"""Archive roots: a local path, file:///path or s3://bucket/prefix; any other URL is an error,
never a local folder (``Path("s3://dxt/m100")`` is ``s3:/dxt/m100``, a relative directory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dxt_core.archive import Archive
from dxt_core.config import archive_root
from dxt_core.errors import ConfigError
from dxt_core.store import S3Location, parse_root

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("root", "want"),
    [
        ("s3://dxt/m100", S3Location("dxt", "m100")),
        ("s3://dxt-archive/a/b/", S3Location("dxt-archive", "a/b")),
        ("s3://dxt", S3Location("dxt", "")),
        ("/srv/archive", Path("/srv/archive")),
        ("archive", Path("archive")),
        ("file:///srv/archive", Path("/srv/archive")),
    ],
)
def test_roots_that_work(root, want):
    assert parse_root(root) == want


@pytest.mark.parametrize(
    ("root", "match"),
    [
        ("gs://bucket/x", "unknown scheme gs://"),
        ("foo://x", "unknown scheme foo://"),
        ("s3:/dxt/m100", "one slash"),
        ("s3://Bad_Bucket/x", "not a valid bucket name"),
        ("s3://ab/x", "not a valid bucket name"),
        ("s3://dxt/a//b", "empty"),
        ("s3://dxt/a?x=1", "no \\?query"),
        ("", "empty"),
    ],
)
def test_roots_that_are_errors(root, match):
    with pytest.raises(ConfigError, match=match):
        parse_root(root)
    with pytest.raises(ConfigError, match=match):
        Archive(root)


def test_the_setting_keeps_an_s3_url_as_given_and_refuses_other_schemes():
    assert archive_root({"DXT_ARCHIVE_ROOT": "s3://dxt/m100"}) == "s3://dxt/m100"
    assert archive_root({"DXT_ARCHIVE_ROOT": "/srv/a"}) == Path("/srv/a")
    with pytest.raises(ConfigError, match=r"DXT_ARCHIVE_ROOT: .*unknown scheme gs://"):
        archive_root({"DXT_ARCHIVE_ROOT": "gs://dxt/m100"})


@pytest.mark.parametrize("root", ["gs://dxt/m100", "s3:/dxt/m100"])
def test_extract_with_an_unknown_scheme_fails_and_writes_no_local_folder(tmp_path, root):
    out = subprocess.run(
        [
            *(sys.executable, "-m", "dxt_core.cli", "extract", "examon"),
            *("--url", "http://127.0.0.1:9", "--start-day", "2020-03-09", "--limit", "1"),
            *("--archive", root, "-q"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode != 0
    assert "unknown scheme gs://" in out.stderr or "one slash" in out.stderr
    assert list(tmp_path.iterdir()) == []  # no ./gs:/dxt/m100, no ./s3:/dxt/m100


@pytest.mark.parametrize(
    "root",
    [
        "s3://AKIAREALKEY:Super/Secret@123@mybucket/m100",  # credentials are refused
        "s3://AKIAREALKEY:SuperSecret123@Bad_Bucket/m100",
        "gs://AKIAREALKEY:SuperSecret123@dxt/m100",  # unknown scheme
        "s3:/AKIAREALKEY:SuperSecret123@dxt/m100",  # one slash
        "s3://AKIAREALKEY:SuperSecret123@dxt/m100?x=1",  # a query
        # characters that end a URL in free text: the whole value was quoted
        "s3://AKIAREALKEY:Super'Secret@mybucket/m100",
        "s3://AKIAREALKEY:Super Secret@mybucket/m100",
        's3://AKIAREALKEY:Super"Secret<>@mybucket/m100',
    ],
)
def test_a_root_with_credentials_is_refused_without_echoing_them(root):
    with pytest.raises(ConfigError) as err:
        parse_root(root)
    text = str(err.value)
    assert "SuperSecret" not in text and "Super/Secret" not in text and "AKIA" not in text
    assert "***@" in text
    if root.startswith("s3://") and "?" not in root:
        assert "AWS_ACCESS_KEY_ID" in text  # where the credentials go instead


def test_publish_out_with_credentials_is_refused_without_echoing_them():
    from dxt_core.publish.output import open_out

    for out in (
        "s3://AKIAREALKEY:SuperSecret123@dxt/pub",
        "s3://AKIAREALKEY:it's-SuperSecret@dxt/pub",
    ):
        with pytest.raises(ConfigError) as err:
            open_out(out)
        assert "SuperSecret" not in str(err.value) and "AKIA" not in str(err.value)
