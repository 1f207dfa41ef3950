"""A declaration says only what is its own: what follows a convention (the package, the DAG id,
the roles' modules, the reconcile setting, the connection form's example host, a publish
role's words made of its name and keys) is left out and comes out the same as when it was
spelled out."""

from __future__ import annotations

from typing import Any

import pytest

from dxt_core.backends import (
    Backend,
    backends,
    common_settings,
    get,
    reconcile_setting,
    series_format_setting,
)
from dxt_core.connection import ConnectionSpec
from dxt_core.errors import ConfigError
from dxt_core.publish.role import PartitionedPublish

EXAMON = "dxt_core.backends.examon"


def test_what_a_backend_leaves_out_follows_from_its_name_and_its_package():
    b = Backend(name="examon", title="t")
    assert b.package == EXAMON
    assert (b.tasks, b.publish, b.dag_id) == (".tasks:TASKS", ".publish:PUBLISH", "dxt_examon")
    assert b.dag_tasks().backend == "examon" and b.publish_role().backend == "examon"
    # connection, cli and simulator stay unset: their modules are read where they are used
    assert (b.connection, b.cli, b.simulator) == (None, None, None)
    assert b.spec.backend == "examon"


def test_what_a_backend_gives_wins():
    def tasks() -> object:
        return get("examon").dag_tasks()

    b = Backend(name="examon", title="t", package=EXAMON, dag_id="other", tasks=tasks)
    assert (b.dag_id, b.tasks) == ("other", tasks)
    assert b.dag_tasks() is get("examon").dag_tasks()


def test_a_package_without_tasks_or_publish_modules_has_no_dag_and_does_not_publish(
    tmp_path, monkeypatch
):
    (tmp_path / "bare_backend").mkdir()
    (tmp_path / "bare_backend" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    b = Backend(name="bare", title="t", package="bare_backend")
    assert (b.tasks, b.publish, b.dag_id) == (None, None, "")
    with pytest.raises(ConfigError, match="backend 'bare' declares no DAG"):
        b.dag_tasks()
    with pytest.raises(ConfigError, match="backend 'bare' does not publish"):
        b.publish_role()


def test_a_backend_whose_package_does_not_exist_has_no_roles():
    b = Backend(name="nowhere", title="t")
    assert b.package == "dxt_core.backends.nowhere"
    assert (b.tasks, b.publish, b.dag_id) == (None, None, "")
    assert not b.has_connection() and not b.has_simulator()


@pytest.mark.parametrize(
    ("name", "package", "dag_id"),
    [
        ("examon", "dxt_core.backends.examon", "dxt_examon"),
        ("kwollect", "dxt_core.backends.kwollect", "dxt_kwollect"),
        ("collectd_es", "dxt_core.backends.collectd_es", "dxt_collectd_es"),
        ("prometheus", "dxt_core.backends.prometheus", "dxt_prometheus"),
    ],
)
def test_the_builtin_declarations_come_out_as_they_were_spelled(name, package, dag_id):
    b = get(name)
    assert (b.package, b.dag_id) == (package, dag_id)
    assert (b.tasks, b.publish) == (".tasks:TASKS", ".publish:PUBLISH")
    keys = [s.key.removeprefix(f"{name}_") for s in b.settings]
    assert keys[:9] == [
        "start_date",
        "catchup",
        "conn_id",
        "pool",
        "retries",
        "max_active_runs",
        "settle_seconds",
        "task_timeout_minutes",
        "reconcile_days",
    ]
    assert b.setting("reconcile_days") == reconcile_setting(name)


def test_every_registered_backend_with_a_dag_has_its_conventional_dag_id():
    for b in backends():
        if b.tasks is not None:
            assert b.dag_id == f"dxt_{b.name}", b.name


def test_common_settings_add_the_reconcile_setting_when_asked():
    plain = common_settings("x", start_date="2024-01-01")
    assert [s.key for s in plain][-1] == "x_task_timeout_minutes"
    both = common_settings("x", start_date="2024-01-01", reconcile=True)
    assert both == (*plain, reconcile_setting("x"))


@pytest.mark.parametrize("name", ["examon", "prometheus"])
def test_a_series_backend_has_the_format_setting(name):
    s = get(name).setting("format")
    assert s == series_format_setting(name)
    assert (s.key, s.kind, s.default, s.env) == (
        f"{name}_format",
        str,
        "csv",
        f"DXT_{name.upper()}_FORMAT",
    )


def _spec(backend: str, **kw: Any) -> ConnectionSpec[Any]:
    return ConnectionSpec(backend=backend, hook_name="h", build=lambda f: f, **kw)


def test_the_example_host_follows_from_the_backend_unless_given():
    assert _spec("examon").host_example == "examon.example.org"
    assert _spec("collectd_es").host_example == "collectd-es.example.org"  # a host name
    assert _spec("x", host_example="es.example.org").host_example == "es.example.org"
    entry = _spec("prometheus", default_port=9090).provider_entry("H")
    placeholders = entry["ui-field-behaviour"]["placeholders"]
    assert placeholders == {"host": "prometheus.example.org", "port": "9090"}


@pytest.mark.parametrize(
    ("name", "host", "scheme", "other_schema"),
    [
        ("examon", "examon.example.org", "http", "ignore"),
        ("kwollect", "https://api.grid5000.fr/stable", "https", "path"),
        ("collectd_es", "es.example.org", "http", "error"),
        ("prometheus", "prometheus.example.org", "http", "ignore"),
    ],
)
def test_the_builtin_connection_specs_keep_their_form(name, host, scheme, other_schema):
    spec = get(name).spec
    assert (spec.host_example, spec.default_scheme, spec.other_schema) == (
        host,
        scheme,
        other_schema,
    )


class _SiteMetric(PartitionedPublish):
    backend = "x"
    keys = ("site", "metric")
    title = "X telemetry"


class _Spelled(_SiteMetric):
    dataset_name = "x-data"
    description = "what X measures"
    layout_summary = "one file a month"
    layout = ("a", "b")
    example_glob = "year_month=*/site=a/metric=*/a_0.parquet"


def test_a_publish_role_words_follow_from_its_name_and_keys():
    role = _SiteMetric()
    assert role.dataset_name == "x-dataset"
    assert role.description == "X telemetry"
    assert role.layout_summary == "one Parquet file per site, metric and month"
    assert role.layout == ("year_month=YY-MM/site=<site>/metric=<metric>/a_0.parquet",)
    assert role.example_glob == "year_month=*/site=*/metric=*/a_0.parquet"


def test_a_publish_role_words_it_gives_win():
    role = _Spelled()
    assert (role.dataset_name, role.description, role.layout_summary) == (
        "x-data",
        "what X measures",
        "one file a month",
    )
    assert role.layout == ("a", "b")
    assert role.example_glob == "year_month=*/site=a/metric=*/a_0.parquet"


#: The built-in publish roles' words, as they were spelled out in each role.
PUBLISHED: dict[str, tuple[Any, ...]] = {
    "examon": (
        "examon-dataset",
        "Examon telemetry",
        "one Parquet file per metric and month (M100 ExaData layout)",
        (
            "year_month=YY-MM/plugin=<plugin>/metric=<metric>/a_0.parquet",
            "year_month=YY-MM/plugin=job_table/metric=<table>/a_0.parquet",
        ),
        "year_month=*/plugin=ipmi_pub/metric=*/a_0.parquet",
    ),
    "kwollect": (
        "kwollect-dataset",
        "Kwollect metrics of Grid'5000",
        "one Parquet file per site, metric and month",
        ("year_month=YY-MM/site=<site>/metric=<metric>/a_0.parquet",),
        "year_month=*/site=*/metric=bmc_node_power_watt/a_0.parquet",
    ),
    "collectd_es": (
        "collectd-dataset",
        "collectd metrics stored in Elasticsearch",
        "one Parquet file per family and month",
        ("year_month=YY-MM/family=<family>/a_0.parquet",),
        "year_month=*/family=disk/a_0.parquet",
    ),
    "prometheus": (
        "prometheus-dataset",
        "Prometheus metrics",
        "one Parquet file per metric and month",
        ("year_month=YY-MM/metric=<name>/a_0.parquet",),
        "year_month=*/metric=*/a_0.parquet",
    ),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_builtin_publish_roles_keep_their_words(name):
    role = get(name).publish_role()
    words = (
        role.dataset_name,
        role.description,
        role.layout_summary,
        tuple(role.layout),
        role.example_glob,
    )
    assert words == PUBLISHED[name]


def test_kwollect_sorts_its_series_by_node_the_default():
    assert get("kwollect").publish_role().series_order == ("node",)
