"""Bad DAG settings are refused where they are read, naming the variable and what to write:
a start day that is not YYYY-MM-DD, a number out of range, an unknown format, family or
metric (before: a raw ValueError at DAG import, Airflow's "required params without default
values", a DAG that never starts a run, or a setting blamed on a command-line option)."""

from __future__ import annotations

import pytest

from dxt_core import config
from dxt_core.backends import BUILTIN, dag_settings
from dxt_core.backends.collectd_es.tasks import TASKS as COLLECTD_ES
from dxt_core.backends.examon.tasks import TASKS as EXAMON
from dxt_core.backends.prometheus.tasks import TASKS as PROMETHEUS
from dxt_core.errors import ConfigError


@pytest.fixture(autouse=True)
def _no_airflow_section():
    """The settings come from the environment alone (no [dxt] lookup of an earlier test)."""
    before = config._fallback
    config.set_fallback(None)
    yield
    config.set_fallback(before)


@pytest.mark.parametrize("backend", BUILTIN)
@pytest.mark.parametrize("value", ["yesterday", "2025-13-01", "2025-02-30", "09/03/2020"])
def test_a_bad_start_date_names_the_variable_and_the_form(monkeypatch, backend, value):
    env = f"DXT_{backend.upper()}_START_DATE"
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError) as err:
        dag_settings(backend)
    assert str(err.value).startswith(f"{env}={value!r}: write YYYY-MM-DD")


def test_a_good_start_date_is_kept(monkeypatch):
    monkeypatch.setenv("DXT_EXAMON_START_DATE", "2025-01-02")
    assert dag_settings("examon")["start_date"] == "2025-01-02"


def test_a_bad_value_of_the_airflow_section_names_the_option(monkeypatch):
    monkeypatch.delenv("DXT_EXAMON_START_DATE", raising=False)
    config.set_fallback(lambda key: "yesterday" if key == "examon_start_date" else None)
    with pytest.raises(ConfigError, match=r"^\[dxt\] examon_start_date='yesterday': write"):
        dag_settings("examon")


@pytest.mark.parametrize(
    ("env", "value", "least"),
    [
        ("DXT_EXAMON_MAX_ACTIVE_RUNS", "0", 1),
        ("DXT_EXAMON_RETRIES", "-3", 0),
        ("DXT_EXAMON_TASK_TIMEOUT_MINUTES", "-5", 1),
        ("DXT_EXAMON_TASK_TIMEOUT_MINUTES", "0", 1),
        ("DXT_EXAMON_SETTLE_SECONDS", "-100", 0),
        ("DXT_PROMETHEUS_MAX_ACTIVE_RUNS", "0", 1),
        ("DXT_KWOLLECT_RETRIES", "-1", 0),
        ("DXT_COLLECTD_ES_SLICES", "0", 1),
        ("DXT_COLLECTD_ES_PAGE_SIZE", "-1", 1),
        ("DXT_COLLECTD_ES_TIMESTEP", "0", 1),
    ],
)
def test_numbers_out_of_range_name_the_variable_and_the_range(monkeypatch, env, value, least):
    monkeypatch.setenv(env, value)
    backend = "collectd_es" if "COLLECTD_ES" in env else env.split("_")[1].lower()
    with pytest.raises(ConfigError) as err:
        dag_settings(backend)
    assert str(err.value) == f"{env}={value!r}: must be {least} or more"


def test_numbers_at_their_minimum_are_kept(monkeypatch):
    monkeypatch.setenv("DXT_EXAMON_RETRIES", "0")
    monkeypatch.setenv("DXT_EXAMON_SETTLE_SECONDS", "0")
    monkeypatch.setenv("DXT_EXAMON_MAX_ACTIVE_RUNS", "1")
    s = dag_settings("examon")
    assert (s["retries"], s["settle_seconds"], s["max_active_runs"]) == (0, 0, 1)


@pytest.mark.parametrize(
    ("tasks", "env"), [(EXAMON, "DXT_EXAMON_FORMAT"), (PROMETHEUS, "DXT_PROMETHEUS_FORMAT")]
)
def test_an_unknown_format_setting_names_the_variable_and_the_choices(monkeypatch, tasks, env):
    monkeypatch.setenv(env, "xml")
    message = rf"^{env}='xml': choose one of csv, parquet$"
    with pytest.raises(ConfigError, match=message):
        tasks.params()  # the DAG's Param, at parse time
    with pytest.raises(ConfigError, match=message):
        tasks.output_format({})  # a run without the Param
    with pytest.raises(ConfigError, match=message):
        tasks.output_format({"format": "parquet"})  # the setting is checked first
    monkeypatch.setenv(env, "csv")
    with pytest.raises(ConfigError, match=r"^the run's 'format' param='xml': choose one of"):
        tasks.output_format({"format": "xml"})
    assert tasks.output_format({"format": "csv"}) == "csv" == tasks.output_format({})


@pytest.mark.parametrize(
    ("tasks", "env"), [(EXAMON, "DXT_EXAMON_FORMAT"), (PROMETHEUS, "DXT_PROMETHEUS_FORMAT")]
)
def test_a_run_format_other_than_the_archives_is_refused_for_the_whole_run(monkeypatch, tasks, env):
    """A Parquet run over a CSV archive archived its days where the coverage view does not
    look: "missing" for ever, and every refill archived them again."""
    from dxt_core.errors import run_wide

    monkeypatch.setenv(env, "csv")
    with pytest.raises(ConfigError) as ei:
        tasks.output_format({"format": "parquet"})
    assert str(ei.value).startswith(
        f"the run's 'format' param is parquet, but this archive is kept as csv ({env})"
    )
    assert f"set {env}=parquet" in str(ei.value) and run_wide(ei.value)


def test_a_good_format_setting_is_the_params_default(monkeypatch):
    monkeypatch.setenv("DXT_EXAMON_FORMAT", "parquet")
    assert EXAMON.params()["format"]["default"] == "parquet"


def test_an_unknown_collectd_es_format_names_the_variable(monkeypatch):
    monkeypatch.setenv("DXT_COLLECTD_ES_FORMATS", "jsonl,xml")
    with pytest.raises(ConfigError) as err:
        COLLECTD_ES.params()
    assert str(err.value) == (
        "DXT_COLLECTD_ES_FORMATS='jsonl,xml': unknown 'xml'; choose from jsonl, hdf5 "
        "(comma-separated)"
    )
    monkeypatch.setenv("DXT_COLLECTD_ES_FORMATS", "hdf5")
    assert COLLECTD_ES.params()["formats"]["default"] == ["hdf5"]


def test_an_unknown_collectd_es_family_names_the_variable(monkeypatch):
    monkeypatch.setenv("DXT_COLLECTD_ES_FAMILIES", "cpu,bogus")
    with pytest.raises(ConfigError) as err:
        COLLECTD_ES.configured_units()
    assert str(err.value) == (
        "DXT_COLLECTD_ES_FAMILIES='cpu,bogus': unknown 'bogus'; choose from disk, cpu, "
        "memory (comma-separated)"
    )
    monkeypatch.setenv("DXT_COLLECTD_ES_FAMILIES", "memory,cpu")
    assert COLLECTD_ES.configured_units() == ["memory", "cpu"]


def test_a_bad_prometheus_metrics_setting_names_the_variable_not_the_option(monkeypatch):
    monkeypatch.setenv("DXT_PROMETHEUS_METRICS", "a b")
    with pytest.raises(ConfigError) as err:
        PROMETHEUS.configured_units()
    assert str(err.value).startswith("DXT_PROMETHEUS_METRICS: 'a b' is neither a metric name")
    assert "--metrics" not in str(err.value)
