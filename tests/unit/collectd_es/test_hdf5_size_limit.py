"""A TOKIO HDF5 file too large to lay out (its datasets are made whole, in memory) is a clear
error naming the options, not numpy's MemoryError for 25 TiB (``--num-nodes 100000000``)."""

from __future__ import annotations

import subprocess
import sys


def test_a_file_too_large_names_the_options_and_writes_nothing(tmp_path):
    empty = tmp_path / "pages.json"
    empty.write_text("[]")
    out = tmp_path / "o" / "out.hdf5"
    run = subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", "extract", "collectd-es", "--input", str(empty),
         "--allow-empty", "--num-nodes", "100000000", "--out", str(out),
         "2024-01-01T00:00:00", "2024-01-02T00:00:00"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "give fewer --num-nodes or --ssds-per-node, or a larger --timestep" in run.stderr
    assert not out.exists()


def test_an_empty_range_of_a_new_file_names_the_options(tmp_path):
    """It said "empty time range [1706745600, 1704153600)", naming no option."""
    empty = tmp_path / "pages.json"
    empty.write_text("[]")
    run = subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", "extract", "collectd-es", "--input", str(empty),
         "--allow-empty", "--init-start", "2024-02-01T00:00:00", "--out", str(tmp_path / "o.h5"),
         "2024-01-01T00:00:00", "2024-01-02T00:00:00"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert (
        "a new HDF5 file's range is empty: END 2024-01-02T00:00:00 is not after --init-start "
        "2024-02-01T00:00:00"
    ) in run.stderr
