"""Temporary names carry ``<host tag>.<pid>`` (what a killed run left can be told apart):
bounded, so that the longest unit name the archive accepts still makes file names the file
system accepts. With the host name itself in them, a 229-byte metric accepted by the name
check failed every day with "File name too long" (a review of this session's change)."""

from __future__ import annotations

import re

from dxt_core.fsio import write_json_atomic
from dxt_core.paths import check_unit_name
from dxt_core.procs import HOST_TAG, owned_prefix


def test_the_longest_accepted_unit_name_makes_temporary_names_that_fit(tmp_path):
    assert re.fullmatch(r"h[0-9a-f]{8}", HOST_TAG)
    longest = max(n for n in range(1, 256) if check_unit_name("m" * n, "metric") is None)
    assert check_unit_name("m" * (longest + 1), "metric") is not None
    # Examon's tag-key cache of a Parquet metric: the longest file name made of a unit's
    path = tmp_path / f"metric={'m' * longest}.json"
    write_json_atomic(path, {"tags": []})
    assert path.is_file()
    assert len(owned_prefix("")) <= len(HOST_TAG) + 1 + 7 + 1
