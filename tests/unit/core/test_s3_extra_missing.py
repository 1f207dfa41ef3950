"""An s3:// archive root without the ``s3`` extra (boto3) fails at once with the install hint,
run-wide: the command stops with exit status 2 (not a ``No module named 'botocore'``
traceback at the first request of every unit) and an Airflow task fails without retries. An
installed botocore too old for the client's options, or one that fails to import, is said as
such. The environment is faked in a subprocess (``sys.modules[name] = None`` blocks an
import, as an absent package would; a directory first on ``sys.path`` holds a fake package);
the shared venv is left as it is."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

HINT = "s3:// archive roots need boto3: pip install 'dxt-archive[s3]'"
BLOCK = 'import sys\nfor _n in ("boto3", "botocore"):\n    sys.modules[_n] = None\n'


def _python(code, tmp_path, env=None, path_first=None):
    script = BLOCK if path_first is None else f"import sys\nsys.path.insert(0, {path_first!r})\n"
    return subprocess.run(
        [sys.executable, "-c", script + textwrap.dedent(code)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["index", "rebuild", "--archive", "s3://bucket/x"],
        [
            *("coverage", "examon", "--start-day", "2024-01-01", "--end-day", "2024-01-02"),
            *("--archive", "s3://bucket/x"),
        ],
        [
            *("extract", "examon", "--url", "http://127.0.0.1:9", "--start-day", "2024-01-01"),
            *("--metric", "m", "--plugin", "p", "--archive", "s3://bucket/x"),
        ],
    ],
    ids=["index-rebuild", "coverage", "extract"],
)
def test_a_command_on_an_s3_root_without_boto3_stops_with_the_install_hint(tmp_path, argv):
    out = _python(f"from dxt_core.cli import main\nraise SystemExit(main({argv!r}))", tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert HINT in out.stderr
    assert "Traceback" not in out.stderr and "FAILED" not in out.stdout + out.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_error_is_run_wide_and_kept_by_the_archive_root_setting(tmp_path):
    out = _python(
        """
        from dxt_core.config import archive_root
        from dxt_core.errors import ConfigError, run_wide
        from dxt_core.publish.output import open_out
        from dxt_core.store import parse_root
        for call in (
            lambda: parse_root("s3://bucket/x"), archive_root, lambda: open_out("s3://bucket/p")
        ):
            try:
                call()
            except ConfigError as exc:
                print(run_wide(exc), exc)
        """,
        tmp_path,
        env={"DXT_ARCHIVE_ROOT": "s3://bucket/x"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == [
        f"True {HINT}",
        f"True DXT_ARCHIVE_ROOT: {HINT}",
        f"True --out s3://bucket/p: {HINT}",
    ]


@pytest.mark.slow  # 3-6 s on 2 cores (the fast tier's limit is 3 s)
def test_an_airflow_archive_task_fails_without_retries(tmp_path):
    out = _python(
        """
        from airflow.sdk.exceptions import AirflowFailException
        from dxt_core.airflow.tasks import archive_unit, reconcile_recent
        for call in (
            lambda: archive_unit("examon", None, {}, "examon_default"),
            lambda: reconcile_recent("examon", {"params": {"day": "2024-01-05"}}, "examon_default"),
        ):
            try:
                call()
            except AirflowFailException as exc:
                print("not retried:", exc)
        """,
        tmp_path,
        env={"DXT_ARCHIVE_ROOT": "s3://bucket/x"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout + out.stderr[-3000:]
    for line in lines:
        assert line.startswith(f"not retried: DXT_ARCHIVE_ROOT: {HINT}"), line


def _fake_packages(tmp_path, botocore_init):
    fake = tmp_path / "fake"
    for name, init in (("boto3", ""), ("botocore", botocore_init)):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text(init)
    return str(fake)


def test_a_botocore_older_than_the_client_needs_is_refused_naming_its_version(tmp_path):
    fake = _fake_packages(tmp_path, '__version__ = "1.35.99"\n')
    out = _python(
        """
        from dxt_core.errors import ConfigError, run_wide
        from dxt_core.store import parse_root
        try:
            parse_root("s3://bucket/x")
        except ConfigError as exc:
            print(run_wide(exc), exc)
        """,
        tmp_path,
        path_first=fake,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("True s3:// archive roots need boto3: 1.36.0 or later")
    assert "botocore 1.35.99 is installed" in out.stdout
    assert "pip install -U 'dxt-archive[s3]'" in out.stdout


def test_a_botocore_that_fails_to_import_is_not_called_missing(tmp_path):
    fake = _fake_packages(tmp_path, 'raise ImportError("cannot import name x from urllib3")\n')
    out = _python(
        """
        from dxt_core.errors import ConfigError
        from dxt_core.store import parse_root
        try:
            parse_root("s3://bucket/x")
        except ConfigError as exc:
            print(exc)
        """,
        tmp_path,
        path_first=fake,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "botocore failed to import (ImportError: cannot import name x from urllib3)" in (
        out.stdout
    )
