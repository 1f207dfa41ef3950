"""pyproject.toml metadata that setuptools accepts without a deprecation warning (issue 15)."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import ROOT


def test_license_is_an_spdx_string_with_license_files():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = meta["project"]
    # A TOML table (`license = { text = ... }`) is deprecated since setuptools 77: the build
    # prints a BuildBackendWarning at every install.
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert all((ROOT / f).is_file() for f in project["license-files"])
    # license-files and an SPDX `license` string need setuptools >= 77 to build.
    (req,) = [r for r in meta["build-system"]["requires"] if r.startswith("setuptools")]
    found = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", req)
    assert found and int(found.group(1)) >= 77, req
