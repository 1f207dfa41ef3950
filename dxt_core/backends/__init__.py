"""The backends, one package each, and the one list of them.

Every backend package has the same modules for the same roles:

* ``connection``: where the server is (a :class:`~dxt_core.connection.ConnectionSpec`,
  ``SPEC``) and the connection object it builds;
* ``source``: the queries: (what, window) -> records, with paging, splitting and retries;
* ``archive_day``: one (parts, day) unit through :func:`dxt_core.archive_day.archive_one_day`;
* ``tasks``: its DAG without Airflow, a :class:`~dxt_core.backends.roles.BackendTasks`
  (``TASKS``): the units, the day's zone, the archive call, extra Params;
* ``cli``: ``dxt extract <backend>`` (``add_extract_parser``) and the units ``dxt coverage``
  checks (``coverage_units``);
* ``simulator``: a stand-in server for tests and demos (``main``), run as
  ``python -m dxt_core.backends.<name>.simulator``;
* ``publish`` (optional): ``dxt publish <backend>``, a
  :class:`~dxt_core.backends.roles.PublishRole` (``PUBLISH``).

The package's ``__init__`` declares a :class:`Backend` (names, task id, settings; the
package, the DAG id and the roles follow from the name and these modules) and imports
nothing heavy. The CLI, the provider info, the Airflow hooks, DAGs, day-end wait and coverage
view, and the demo read :func:`backends`; adding a backend is a new package and one line in
:data:`BUILTIN` (or, out of tree, ``DXT_EXTRA_BACKENDS``). See docs/adding-a-backend.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dxt_core.config import Setting, check_day
from dxt_core.errors import ConfigError

if TYPE_CHECKING:
    from dxt_core.backends.roles import BackendTasks, CliRole, PublishRole, SimulatorRole
    from dxt_core.connection import ConnectionSpec

#: The backends that ship with dxt-archive, by package name.
BUILTIN = ("examon", "kwollect", "collectd_es", "prometheus")
ENV_EXTRA = "DXT_EXTRA_BACKENDS"


#: A role reference: ``"module:attr"`` (``attr`` left out: the module itself), the module
#: absolute or relative to the backend's package (``".tasks:TASKS"``), imported when the role
#: is first used; or a function returning the role (the older form, still accepted).
RoleRef = str | Callable[[], Any]


@dataclass(frozen=True)
class Backend:
    """One backend: its names, where its modules are, its DAG and its settings.

    Attributes:
        name: the archive's top directory and the registry key (``examon``).
        title: one line for ``--help``.
        package: the Python package holding the role modules (default: the in-tree
            ``dxt_core.backends.<name>``; a package elsewhere gives ``package=__name__``).
        cli_name: the word after ``dxt extract`` (``collectd-es``).
        aliases: other names accepted on the command line (``kairosdb``).
        dag_id: the DAG that archives it (default ``dxt_<name>`` when it has a DAG).
        task_id: the mapped task of the DAG (refill commands name it).
        settings: the backend's settings (``DXT_<KEY>``).
        connection: its :class:`~dxt_core.connection.ConnectionSpec` (``".connection:SPEC"``).
        tasks: its :class:`~dxt_core.backends.roles.BackendTasks`, its DAG (``".tasks:TASKS"``).
        cli: its :class:`~dxt_core.backends.roles.CliRole` (``".cli"``: the module).
        simulator: its :class:`~dxt_core.backends.roles.SimulatorRole` (``".simulator"``).
        publish: its :class:`~dxt_core.backends.roles.PublishRole` (``dxt publish``);
            optional: a backend without it does not publish.

    Each role is a :data:`RoleRef`: reading the declaration imports nothing more, and the
    object a reference names is checked against the role's interface where it is used (an
    instance of the role's class, or a module or object with the Protocol's members), so a
    wrong reference is a :class:`~dxt_core.errors.ConfigError` naming the backend, the role
    and what is missing. A role left out is the package's module of that name:
    ``connection``, ``cli`` and ``simulator`` are ``".connection:SPEC"``, ``".cli"`` and
    ``".simulator"``; ``tasks`` and ``publish`` are ``".tasks:TASKS"`` and
    ``".publish:PUBLISH"`` when the package has that module, else none (no DAG; does not
    publish). A backend with the standard files declares only its names and settings.
    """

    name: str
    title: str
    package: str = ""
    cli_name: str = ""
    aliases: tuple[str, ...] = ()
    dag_id: str = ""
    task_id: str = ""
    settings: tuple[Setting, ...] = field(default_factory=tuple)
    connection: RoleRef | None = None
    tasks: RoleRef | None = None
    cli: RoleRef | None = None
    simulator: RoleRef | None = None
    publish: RoleRef | None = None

    def __post_init__(self) -> None:
        # What follows from the name and the package's files (frozen: set once, here).
        if not self.package:
            object.__setattr__(self, "package", f"dxt_core.backends.{self.name}")
        if self.tasks is None and self.has("tasks"):
            object.__setattr__(self, "tasks", ".tasks:TASKS")
        if self.publish is None and self.has("publish"):
            object.__setattr__(self, "publish", ".publish:PUBLISH")
        if not self.dag_id and self.tasks is not None:
            object.__setattr__(self, "dag_id", f"dxt_{self.name}")

    @property
    def command(self) -> str:
        return self.cli_name or self.name

    @property
    def hook_class_name(self) -> str:
        """The Airflow hook's class name (``CollectdEsHook``), made by dxt_core.airflow.hooks."""
        return "".join(p[:1].upper() + p[1:] for p in self.name.split("_")) + "Hook"

    @property
    def hook(self) -> str:
        """The Airflow hook class, ``module.Class`` (the provider info's ``hook-class-name``)."""
        return f"dxt_core.airflow.hooks.{self.hook_class_name}"

    def role(self, role: str, ref: RoleRef, members: tuple[str, ...] = ()) -> Any:
        """The object ``ref`` names for ``role``, checked to have ``members``."""
        if callable(ref):
            found = ref()
        else:
            module, _, attr = ref.partition(":")
            try:
                found = importlib.import_module(module, self.package)
                if attr:
                    found = getattr(found, attr)
            except (ImportError, AttributeError) as exc:
                raise ConfigError(
                    f"backend {self.name!r}: its {role}={ref!r} cannot be loaded ({exc}); give "
                    "'module:attr', the module absolute or relative to the backend's package"
                ) from exc
        missing = [m for m in members if not hasattr(found, m)]
        if missing:
            raise ConfigError(
                f"backend {self.name!r}: its {role} role ({ref!r}) has no "
                f"{', '.join(missing)} (docs/adding-a-backend.md)"
            )
        return found

    def dag_tasks(self) -> BackendTasks[Any]:
        """The backend's DAG roles; a clear error for a backend that declares none."""
        from dxt_core.backends.roles import BackendTasks

        if self.tasks is None:
            raise ConfigError(
                f"backend {self.name!r} declares no DAG: give its Backend tasks= naming its "
                "BackendTasks (docs/adding-a-backend.md)"
            )
        found = self.role("tasks", self.tasks)
        if not isinstance(found, BackendTasks):
            raise ConfigError(
                f"backend {self.name!r}: its tasks={self.tasks!r} is a "
                f"{type(found).__name__}, not a BackendTasks"
            )
        if found.backend != self.name:
            raise ConfigError(
                f"backend {self.name!r}: its tasks object says backend={found.backend!r}"
            )
        return found

    def module(self, role: str) -> ModuleType:
        """The backend's module for ``role`` (``connection``, ``source``, ``cli``...)."""
        return importlib.import_module(f"{self.package}.{role}")

    def has(self, role: str) -> bool:
        """Whether the package has a module for ``role`` (False too when there is no package)."""
        try:
            return importlib.util.find_spec(f"{self.package}.{role}") is not None
        except ModuleNotFoundError:
            return False

    @property
    def spec(self) -> ConnectionSpec[Any]:
        """The connection spec (the ``connection`` role, else ``connection.SPEC``)."""
        from dxt_core.connection import ConnectionSpec

        found = self.role("connection", self.connection or ".connection:SPEC")
        if not isinstance(found, ConnectionSpec):
            raise ConfigError(
                f"backend {self.name!r}: its connection role is a {type(found).__name__}, "
                "not a ConnectionSpec"
            )
        return found

    def has_connection(self) -> bool:
        return self.connection is not None or self.has("connection")

    def cli_role(self) -> CliRole:
        """The CLI role (the ``cli`` reference, else the ``cli`` module)."""
        role: CliRole = self.role("cli", self.cli or ".cli", _CLI_MEMBERS)
        return role

    def has_simulator(self) -> bool:
        return self.simulator is not None or self.has("simulator")

    def simulator_role(self) -> SimulatorRole:
        """The simulator role (the ``simulator`` reference, else the ``simulator`` module)."""
        role: SimulatorRole = self.role("simulator", self.simulator or ".simulator", ("main",))
        return role

    def publish_role(self) -> PublishRole:
        """The publish role; a clear error naming the backends that publish."""
        if self.publish is None:
            known = ", ".join(b.command for b in publishers()) or "none"
            raise ConfigError(
                f"backend {self.command!r} does not publish (its Backend declares no publish= "
                f"role); backends that publish: {known}"
            )
        found: PublishRole = self.role("publish", self.publish, ("backend", "units", "scan"))
        if found.backend != self.name:
            raise ConfigError(
                f"backend {self.name!r}: its publish role says backend={found.backend!r}"
            )
        return found

    def setting(self, key: str) -> Setting:
        for s in self.settings:
            if s.key == f"{self.name}_{key}":
                return s
        raise KeyError(key)


#: What a CLI role must have (:class:`~dxt_core.backends.roles.CliRole`).
_CLI_MEMBERS = ("add_extract_parser", "coverage_units", "describe_parts", "add_coverage_arguments")


def _load(ref: str) -> Backend:
    module, _, attr = ref.partition(":")
    try:
        backend = getattr(importlib.import_module(module), attr or "BACKEND")
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"{ENV_EXTRA}: cannot load {ref!r} ({exc}); give 'package.module[:BACKEND]'"
        ) from exc
    if not isinstance(backend, Backend):
        raise ConfigError(f"{ENV_EXTRA}: {ref!r} is not a dxt_core.backends.Backend")
    return backend


def _at_most_a_week(seconds: int) -> None:
    if seconds > 7 * 86_400:
        raise ValueError("at most 604800 (a week): a run waits that long after its day ends")


def builtin_backends() -> list[Backend]:
    """The backends that ship with dxt-archive (:data:`BUILTIN`)."""
    return [_load(f"dxt_core.backends.{name}") for name in BUILTIN]


def backends() -> list[Backend]:
    """Every backend: the built-in ones, then those named in ``DXT_EXTRA_BACKENDS``."""
    found = builtin_backends()
    found += [_load(r.strip()) for r in os.environ.get(ENV_EXTRA, "").split(",") if r.strip()]
    return found


def get(name: str) -> Backend:
    """The backend called ``name`` (or one of its aliases); the error lists the known ones."""
    for b in backends():
        if name in (b.name, b.command, *b.aliases):
            return b
    known = ", ".join(b.command for b in backends())
    raise ConfigError(f"unknown backend {name!r}: choose one of {known}")


def publishers() -> list[Backend]:
    """The backends that declare a publish role (``dxt publish <backend>``)."""
    return [b for b in backends() if b.publish is not None]


def get_publisher(name: str) -> Backend:
    """The publishing backend called ``name``; the error lists those that publish."""
    try:
        b = get(name)
    except ConfigError:
        known = ", ".join(b.command for b in publishers()) or "none"
        raise ConfigError(f"unknown backend {name!r}: backends that publish: {known}") from None
    b.publish_role()  # the clear error for one that does not publish
    return b


def dag_settings(name: str) -> dict[str, Any]:
    """A backend's settings by short key (``retries``), for its DAG file."""
    from dxt_core.config import read_all

    b = get(name)
    return read_all(b.settings, prefix=f"{b.name}_")


def reconcile_setting(name: str) -> Setting:
    """``<name>_reconcile_days`` (``DXT_<NAME>_RECONCILE_DAYS``): the past days each daily run
    of a backend with the reconcile role counts at the source (0: off)."""
    return Setting(
        f"{name}_reconcile_days",
        int,
        3,
        "past days each daily run counts at the source, refetching those that grew (0: off)",
    )


def series_format_setting(name: str) -> Setting:
    """``<name>_format`` (``DXT_<NAME>_FORMAT``): the format a backend whose tasks are a
    :class:`~dxt_core.backends.roles.SeriesTasks` writes when a run's ``format`` Param does
    not choose one."""
    return Setting(f"{name}_format", str, "csv", "csv (gzip CSV) or parquet")


def common_settings(
    name: str,
    *,
    start_date: str,
    pool: str = "default_pool",
    conn_id: str = "",
    max_active_runs: int = 4,
    reconcile: bool = False,
) -> tuple[Setting, ...]:
    """The settings every backend's DAG has, with the backend's defaults (``conn_id``:
    ``<name>_default`` unless given); with ``reconcile``, the reconcile role's
    :func:`reconcile_setting` after them."""
    p = f"{name}_"
    conn_id = conn_id or f"{name}_default"
    settings = (
        Setting(p + "start_date", str, start_date, "first day of the schedule", check=check_day),
        Setting(p + "catchup", bool, True, "create runs for every past day"),
        Setting(p + "conn_id", str, conn_id, "Airflow connection id"),
        Setting(p + "pool", str, pool, "Airflow pool that throttles the archive tasks"),
        Setting(p + "retries", int, 2, "task retries (2 minutes apart)", minimum=0),
        Setting(p + "max_active_runs", int, max_active_runs, "days processed at once", minimum=1),
        Setting(
            p + "settle_seconds",
            int,
            900,
            "wait after the day ends before archiving it (at most a week)",
            minimum=0,
            check=_at_most_a_week,
        ),
        Setting(
            p + "task_timeout_minutes",
            int,
            180,
            "execution_timeout of one archive task (a hung request cannot hold a slot longer)",
            minimum=1,
        ),
    )
    return (*settings, reconcile_setting(name)) if reconcile else settings


def series_backend(
    name: str, title: str, *own: Setting, alias: str, start_date: str, pool: str = "default_pool"
) -> Backend:
    """The declaration of a backend whose tasks are a
    :class:`~dxt_core.backends.roles.SeriesTasks` (a unit a metric, its days archived by
    ``archive_metric_day`` as gzip CSV or Parquet and reconciled with the source's counts):
    its settings are :func:`common_settings`, its ``own``, then :func:`series_format_setting`."""
    common = common_settings(name, start_date=start_date, pool=pool, reconcile=True)
    return Backend(
        name=name,
        title=title,
        aliases=(alias,),
        task_id="archive_metric_day",
        settings=(*common, *own, series_format_setting(name)),
    )
