"""A backend's roles are references (``"module:attr"``) loaded where they are used and
checked against the role's interface: a wrong reference is a clear error, never an
AttributeError deep in the CLI or a DAG."""

from __future__ import annotations

import pytest

from dxt_core.backends import Backend, backends
from dxt_core.backends.roles import BackendTasks
from dxt_core.connection import ConnectionSpec
from dxt_core.errors import ConfigError

EXAMON = "dxt_core.backends.examon"


def test_every_registered_backend_resolves_its_roles():
    for b in backends():
        assert isinstance(b.spec, ConnectionSpec), b.name
        assert isinstance(b.dag_tasks(), BackendTasks), b.name
        assert callable(b.cli_role().add_extract_parser), b.name
        assert callable(b.simulator_role().main), b.name
        if b.publish is not None:
            assert b.publish_role().backend == b.name


def test_references_absolute_relative_and_the_older_loader_functions():
    from dxt_core.backends.examon.tasks import TASKS

    for tasks in (".tasks:TASKS", f"{EXAMON}.tasks:TASKS", lambda: TASKS):
        b = Backend(name="examon", title="t", package=EXAMON, tasks=tasks)
        assert b.dag_tasks() is TASKS
    # left out: the package's modules of those names
    plain = Backend(name="examon", title="t", package=EXAMON)
    assert plain.spec.backend == "examon" and plain.cli_role().__name__ == f"{EXAMON}.cli"


@pytest.mark.parametrize(
    ("roles", "call", "message"),
    [
        ({"tasks": ".nope:TASKS"}, "dag_tasks", r"backend 'x': its tasks='\.nope:TASKS' cannot"),
        ({"tasks": ".tasks:NOPE"}, "dag_tasks", r"its tasks='\.tasks:NOPE' cannot be loaded"),
        ({"tasks": ".connection:SPEC"}, "dag_tasks", r"is a ConnectionSpec, not a BackendTasks"),
        ({"connection": ".tasks:TASKS"}, "spec", r"connection role is a ExamonTasks, not a"),
        ({"cli": ".connection"}, "cli_role", r"its cli role \('\.connection'\) has no add_extract"),
        (
            {"simulator": ".catalog"},
            "simulator_role",
            r"simulator role \('\.catalog'\) has no main",
        ),
    ],
)
def test_a_wrong_reference_is_a_clear_error(roles, call, message):
    b = Backend(name="x", title="t", package=EXAMON, **roles)
    with pytest.raises(ConfigError, match=message):
        getattr(b, call) if call == "spec" else getattr(b, call)()


def test_a_tasks_object_of_another_backend_is_refused():
    b = Backend(name="kwollect", title="t", package=EXAMON, tasks=".tasks:TASKS")
    with pytest.raises(ConfigError, match="its tasks object says backend='examon'"):
        b.dag_tasks()
