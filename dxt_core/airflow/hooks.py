"""Airflow hooks: an Airflow connection -> a backend's connection, per the backend's spec.

One hook class does the work for every backend (:class:`DxtHook`); each backend's hook only
names its :class:`~dxt_core.connection.ConnectionSpec` and what ``get_conn`` returns. The form
fields are declared in the provider info (``conn-fields``), not coded here, and the UI's
"Test" button calls :meth:`DxtHook.test_connection`, which sends the spec's probe request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseHook

from dxt_core.backends.collectd_es.connection import SPEC as COLLECTD_ES_SPEC
from dxt_core.backends.examon.catalog import ExamonOptions
from dxt_core.backends.examon.connection import SPEC as EXAMON_SPEC
from dxt_core.backends.examon.connection import ExamonConnection
from dxt_core.backends.kwollect.connection import SPEC as KWOLLECT_SPEC
from dxt_core.connection import ConnectionSpec
from dxt_core.errors import DxtError

if TYPE_CHECKING:  # these pull in the sources' HTTP clients
    from dxt_core.backends.collectd_es.source import CollectdEsConnection, CollectdEsSource
    from dxt_core.backends.examon.source import KairosDBSource
    from dxt_core.backends.kwollect.connection import KwollectConnection
    from dxt_core.backends.kwollect.source import KwollectClient


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
        # Each hook also accepts its historical keyword (examon_conn_id=...).
        legacy = kwargs.pop(self.spec.hook_kwarg, None)
        super().__init__(**kwargs)
        self.conn_id = conn_id or legacy or self.spec.default_conn_id
        setattr(self, self.spec.hook_kwarg, self.conn_id)

    def connection(self) -> Any:
        """The backend's connection object, checked (unknown extras, bad numbers, no host)."""
        c = self.get_connection(self.conn_id)
        return self.spec.from_fields(
            conn_id=self.conn_id,
            host=c.host,
            port=c.port,
            schema=c.schema,
            login=c.login,
            password=c.password,
            extra=c.extra_dejson,
        )

    def test_connection(self) -> tuple[bool, str]:
        """One cheap request to the server: the UI's "Test" button."""
        try:
            conn = self.connection()
            if self.spec.probe is None:
                return True, "the connection's fields are valid (no test request for this type)"
            return True, self.spec.probe(conn)
        except DxtError as exc:
            return False, str(exc)


class ExamonHook(DxtHook):
    """Examon (KairosDB, optionally through Grafana) from an Airflow connection.

    Any connection type works (``http`` included): host, port, schema (http/https), login,
    password; extras as in :data:`dxt_core.backends.examon.connection.SPEC`.
    """

    spec = EXAMON_SPEC

    def connection(self) -> ExamonConnection:
        conn: ExamonConnection = super().connection()
        return conn

    def get_conn(self, options: ExamonOptions | None = None) -> KairosDBSource:
        from dxt_core.backends.examon.source import KairosDBSource

        return KairosDBSource(self.connection(), options=options)


class KwollectHook(DxtHook):
    """The Grid'5000 API (reference + Kwollect metrics) from an Airflow connection."""

    spec = KWOLLECT_SPEC

    def connection(self) -> KwollectConnection:
        conn: KwollectConnection = super().connection()
        return conn

    def get_conn(self) -> KwollectClient:
        return self.connection().client()


class CollectdEsHook(DxtHook):
    """Elasticsearch holding collectd documents, from an Airflow connection."""

    spec = COLLECTD_ES_SPEC

    def connection(self) -> CollectdEsConnection:
        conn: CollectdEsConnection = super().connection()
        return conn

    def get_conn(self, **kwargs: Any) -> CollectdEsSource:
        from dxt_core.backends.collectd_es.source import CollectdEsSource

        return CollectdEsSource(self.connection(), **kwargs)
