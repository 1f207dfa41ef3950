"""Airflow hooks: an Airflow connection -> a backend's connection object, per its spec.

One hook class does the work for every backend (:class:`DxtHook`); each registered backend
gets a subclass named after it (``ExamonHook``, ``CollectdEsHook``: ``Backend.hook_class_name``)
that only names the backend's :class:`~dxt_core.connection.ConnectionSpec`. They are made
from the registry when first asked for (``from dxt_core.airflow.hooks import ExamonHook``, or
the provider info's ``hook-class-name``), so a backend adds no code here. The form fields are
declared in the provider info (``conn-fields``), and the UI's "Test" button calls
:meth:`DxtHook.test_connection`, which sends the spec's probe request.
"""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.sdk import BaseHook

from dxt_core.backends import Backend, backends
from dxt_core.backends import get as get_backend
from dxt_core.connection import ConnectionSpec
from dxt_core.errors import DxtError


class DxtHook(BaseHook):
    """A dxt-archive backend's connection, read through the backend's spec."""

    spec: ClassVar[ConnectionSpec[Any]]
    conn_name_attr: ClassVar[str]
    default_conn_name: ClassVar[str]
    conn_type: ClassVar[str]
    hook_name: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Airflow reads these class attributes; the spec is their one source.
        super().__init_subclass__(**kwargs)
        cls.conn_name_attr = cls.spec.hook_kwarg
        cls.default_conn_name = cls.spec.default_conn_id
        cls.conn_type = cls.spec.conn_type
        cls.hook_name = cls.spec.hook_name

    def __init__(self, conn_id: str | None = None, **kwargs: Any) -> None:
        # Each hook also takes its connection id under its spec's keyword (hook_kwarg,
        # "<backend>_conn_id"), as Airflow's own hooks do (http_conn_id=...).
        legacy = kwargs.pop(self.spec.hook_kwarg, None)
        super().__init__(**kwargs)
        self.conn_id = conn_id or legacy or self.spec.default_conn_id
        setattr(self, self.spec.hook_kwarg, self.conn_id)

    def connection(self) -> Any:
        """The backend's connection object, checked (unknown extras, bad numbers, no host)."""
        c = self.get_connection(self.conn_id)
        fields = {k: getattr(c, k) for k in ("host", "port", "schema", "login", "password")}
        return self.spec.from_fields(conn_id=self.conn_id, extra=c.extra_dejson, **fields)

    def get_conn(self) -> Any:
        """The backend's connection object (the backend's tasks open their source on it)."""
        return self.connection()

    def test_connection(self) -> tuple[bool, str]:
        """One cheap request to the server: the UI's "Test" button."""
        try:
            conn = self.connection()
            if self.spec.probe is None:
                return True, "the connection's fields are valid (no test request for this type)"
            return True, self.spec.probe(conn)
        except DxtError as exc:
            return False, str(exc)


_HOOKS: dict[str, type[DxtHook]] = {}


def hook_class(backend: Backend | str) -> type[DxtHook]:
    """The hook class of ``backend`` (made once per process)."""
    b = get_backend(backend) if isinstance(backend, str) else backend
    cls = _HOOKS.get(b.name)
    if cls is None:
        doc = f"{b.title} from an Airflow connection (spec: {b.package}.connection.SPEC)."
        made = type(b.hook_class_name, (DxtHook,), {"spec": b.spec, "__doc__": doc})
        made.__module__ = __name__
        cls = _HOOKS.setdefault(b.name, made)
    return cls


def hook_for(backend: str, conn_id: str | None = None) -> DxtHook:
    """A hook on ``conn_id`` (else the backend's default connection)."""
    return hook_class(backend)(conn_id)


def __getattr__(name: str) -> type[DxtHook]:
    # ExamonHook, KwollectHook, ...: whatever the registry holds when asked.
    for b in backends():
        if b.hook_class_name == name:
            return hook_class(b)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
