"""Third-party data carries its licence and its copyright holder as upstream states them:
pytokio's sample files (BSD-3-Clause-LBNL, whose text asks that redistributions retain it)
and the Marconi100 catalogs from dxt_examon (Apache-2.0, Copyright 2022 Mohsen Seyedkazemi
Ardebili, in its LICENSE's notice)."""

from __future__ import annotations

import re

from tests.conftest import ROOT

PYTOKIO = ROOT / "tests" / "data" / "pytokio"


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_pytokio_data_comes_with_its_licence_text_and_its_copyright_line():
    licence = (PYTOKIO / "LICENSE").read_text()
    # pytokio's LICENSE (NERSC/pytokio): the copyright notice, the three clauses, and the
    # "Enhancements" grant that makes it BSD-3-Clause-LBNL
    first = _flat(licence.split("\n \n")[0])
    assert first.startswith("Total Knowledge of I/O Copyright (c) 2017, The Regents of the")
    assert first.endswith("All rights reserved.")
    assert len(re.findall(r"^\(\d\) ", licence, re.M)) == 3
    assert '("Enhancements")' in licence
    readme = _flat((PYTOKIO / "README.md").read_text())
    assert f'("{first}")' in readme  # the README quotes the notice as upstream has it
    assert "`LICENSE`" in readme


def test_the_pytokio_readmes_test_files_exist():
    readme = (PYTOKIO / "README.md").read_text()
    named = re.findall(r"`(tests/[\w/]+\.py)`", readme)
    assert len(named) == 2, named
    for path in named:
        assert (ROOT / path).is_file(), path
        assert "assert_same_as_pytokio" in (ROOT / path).read_text(), path


def test_the_catalogs_name_dxt_examons_copyright_holder():
    notes = _flat((ROOT / "dxt_core" / "data" / "README.md").read_text())
    assert "Copyright 2022 Mohsen Seyedkazemi Ardebili" in notes
    assert "Apache License 2.0" in notes
