"""What the README and docs/deploy.md say about installing matches pyproject.toml: every extra
is named; into an existing Airflow the package goes without the extras that pin Airflow, and
Airflow itself with its constraints file of the pinned version; a module an example imports
that no extra installs says how to install it; ``dxt simulate collectd-es --help`` says the
noida-db it needs is a development dependency."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from tests.conftest import ROOT

META = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS = META["project"]["optional-dependencies"]


def _install_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Installing it as a package")
    return text[start : text.index("\n## ", start + 1)]


def _airflow_pin() -> str:
    (pin,) = {m for r in EXTRAS["airflow"] if (m := re.fullmatch(r"apache-airflow==(.+)", r))}
    return pin.group(1)


def test_the_readme_names_every_extra_with_what_it_is_for():
    section = _install_section()
    for extra in EXTRAS:
        if extra != "dev":
            assert f"`{extra}`" in section, extra
    assert (
        "`analysis` (pandas, for Kwollect's `get_metrics_pandas()` and `read_backup()`)" in section
    )


def test_an_existing_airflow_is_not_replaced_and_airflow_comes_with_its_constraints():
    version = _airflow_pin()
    pinning = [e for e, reqs in EXTRAS.items() if e != "dev" and any("airflow" in r for r in reqs)]
    assert sorted(pinning) == ["airflow", "postgres-celery"]
    constraints = f"apache/airflow/constraints-{version}/constraints-3."
    readme, deploy = _install_section(), (ROOT / "docs" / "deploy.md").read_text()
    for name, text in (("README.md", readme), ("docs/deploy.md", deploy)):
        flat = " ".join(text.split())
        assert "existing Airflow" in flat or "already installed" in flat, name
        assert "without the `airflow` extra" in flat or "without the `[airflow]` extra" in flat
        assert "postgres-celery" in flat, name  # it pins Airflow too
        assert f"apache-airflow=={version}" in flat and constraints in flat, name


def test_a_module_the_readme_imports_that_no_extra_installs_says_how_to_install_it():
    (line,) = [x for x in (ROOT / "README.md").read_text().splitlines() if "import" in x and
               "duckdb" in x]  # fmt: skip
    assert not any(r.startswith("duckdb") for e, rs in EXTRAS.items() if e != "dev" for r in rs)
    assert "pip install duckdb" in line, line


def test_simulate_collectd_es_help_says_noida_db_is_a_dev_dependency():
    run = subprocess.run(
        [sys.executable, "-m", "dxt_core.cli", "simulate", "collectd-es", "--help"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    flat = " ".join(run.stdout.split())
    assert "noida-db is a development dependency, not installed with dxt-archive" in flat
    assert "pip install noida-db" in flat
    assert any(r.startswith("noida-db") for r in EXTRAS["dev"])  # true of pyproject
