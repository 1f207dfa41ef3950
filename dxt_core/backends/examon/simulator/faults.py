"""Fault injection of the Examon simulator: what can go wrong, switched on at runtime.

The faults live in :class:`Faults`, a mutable dataclass that ``POST /_sim/faults`` updates
all-or-nothing (see :meth:`ExamonSimulator.update_faults`); the query engine and the HTTP
handler read it on every request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dxt_core.errors import ConfigError


@dataclass
class Faults:
    """Faults the simulator injects; mutable while it runs (see ``POST /_sim/faults``).

    Attributes:
        delay_s: sleep this long before answering every request (``/_sim/*`` excepted).
        fail_next: answer the next N requests (``/_sim/*`` excepted) with ``fail_status``
            and ``{"errors": ["simulated outage"]}``; decremented on each failure.
        fail_status: HTTP status used by ``fail_next``.
        max_points: a datapoints query whose answer would exceed N points fails with HTTP
            500 and a ``query_limit`` message, like a KairosDB with ``query_limit`` set.
        slow_points: a datapoints query answering more than N points sleeps
            ``slow_delay_s`` first, to provoke client read timeouts.
        slow_delay_s: see ``slow_points``.
        fail_metrics: datapoints queries (values or tags) naming one of these metrics
            always fail with ``fail_status``, to simulate a metric the server cannot read.
    """

    delay_s: float = 0.0
    fail_next: int = 0
    fail_status: int = 503
    max_points: int | None = None
    slow_points: int | None = None
    slow_delay_s: float = 0.0
    fail_metrics: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field, so that a bad ``/_sim/faults`` update is refused whole.

        Raises:
            ConfigError: a field has the wrong type or an out-of-range value.
        """
        for name in ("delay_s", "slow_delay_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"faults.{name} must be a number >= 0, got {value!r}")
        for name in ("fail_next", "fail_status"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"faults.{name} must be an integer >= 0, got {value!r}")
        if not 100 <= self.fail_status <= 599:
            raise ConfigError(f"faults.fail_status must be an HTTP status, got {self.fail_status}")
        for name in ("max_points", "slow_points"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ConfigError(f"faults.{name} must be null or an integer >= 0, got {value!r}")
        if not isinstance(self.fail_metrics, list) or not all(
            isinstance(m, str) for m in self.fail_metrics
        ):
            raise ConfigError(
                f"faults.fail_metrics must be a list of metric names, got {self.fail_metrics!r}"
            )


class _MetricFault(Exception):
    """A queried metric is listed in ``faults.fail_metrics``."""


class _QueryLimit(Exception):
    """The answer would exceed ``faults.max_points``: answered with HTTP 500."""
