"""``dxt publish`` without pyarrow (installed without the ``parquet`` extra): a clear error
naming the extra, and nothing written (it was a traceback, with ``.dxt-publish.json`` left)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

# pyarrow made unimportable in the child, as where it is not installed
RUN = "import sys; sys.modules['pyarrow'] = None; from dxt_core.cli import main; sys.exit(main(sys.argv[1:]))"


def test_publish_without_pyarrow_names_the_extra_and_writes_nothing(tmp_path):
    archive = tmp_path / "archive"
    (archive / "examon").mkdir(parents=True)
    out = tmp_path / "dataset"
    argv = ["publish", "examon", "--archive", str(archive), "--out", str(out)]
    argv += ["--from-month", "2024-05", "--to-month", "2024-05", "--keep-identities"]
    run = subprocess.run(
        [sys.executable, "-c", RUN, *argv], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    assert "needs pyarrow: pip install 'dxt-archive[parquet]'" in run.stderr, run.stderr
    assert not out.exists()


def test_an_empty_version_is_refused(tmp_path):
    """It was written into the dataset's metadata as given."""
    import pytest

    from dxt_core.errors import ConfigError
    from dxt_core.publish.dataset import PublishOptions

    base = {"archive": tmp_path, "out": tmp_path / "o", "from_month": "2024-05",
            "to_month": "2024-05"}  # fmt: skip
    with pytest.raises(ConfigError, match="--dataset-version is empty"):
        PublishOptions(**base, version=" ")
    assert PublishOptions(**base, version="2").version == "2"
