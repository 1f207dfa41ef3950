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


#: The first botocore with the Config options dxt_core/store/client.py sets
#: (request_checksum_calculation, response_checksum_validation): botocore 1.35.99 refuses them
#: with a TypeError, 1.36.0 takes them (both installed and tried). boto3 X.Y.Z requires
#: botocore X.Y.*, so the boto3 minimum must be at least this version too.
FIRST_BOTOCORE_WITH_CHECKSUM_OPTIONS = (1, 36, 0)
CLIENT_CONFIG_OPTIONS = ("request_checksum_calculation", "response_checksum_validation")


def _boto3_minimums(meta):
    extras = meta["project"]["optional-dependencies"]
    found = []
    for extra in ("s3", "dev"):
        (req,) = [r for r in extras[extra] if re.match(r"boto3\b", r)]
        m = re.fullmatch(r"boto3>=(\d+)\.(\d+)\.(\d+)", req)
        assert m, f"[{extra}] {req}: expected boto3>=X.Y.Z"
        found.append((extra, tuple(int(g) for g in m.groups())))
    return found


def test_the_boto3_minimum_has_the_config_options_the_s3_client_sets():
    from botocore.config import Config

    source = (ROOT / "dxt_core" / "store" / "client.py").read_text()
    for option in CLIENT_CONFIG_OPTIONS:
        assert f"{option}=" in source, option  # still set: else this test can go
        assert option in Config.OPTION_DEFAULTS, option  # the installed botocore has it
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for extra, minimum in _boto3_minimums(meta):
        assert minimum >= FIRST_BOTOCORE_WITH_CHECKSUM_OPTIONS, (extra, minimum)


def test_the_description_names_every_built_in_backends_source():
    from dxt_core import backends

    description = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["description"]
    # each built-in backend's source, as its docs name it
    sources = {
        "examon": ["Examon"],
        "kwollect": ["Kwollect"],
        "collectd_es": ["collectd", "Elasticsearch"],
        "prometheus": ["Prometheus", "VictoriaMetrics"],
    }
    assert sorted(sources) == sorted(backends.BUILTIN)
    for name, words in sources.items():
        for word in words:
            assert word in description, (name, word)
