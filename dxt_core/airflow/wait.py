"""``wait_for_day_end``: hold a run until its day is over, in the triggerer.

A run is created at the start of its day (logical date D, 00:00 UTC), but day D can be
archived only once it has ended in the source's time zone, plus a settle delay for late
ingestion. The wait is deferred to the triggerer (``airflow standalone`` and the compose
deployment run one): the task holds no worker slot and no pool slot while it waits, and the
trigger ends the task itself when the moment comes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import BaseOperator

from dxt_core import masking
from dxt_core.errors import ConfigError

log = masking.logger("dxt_core.airflow")

#: The longest wait accepted: a later end means the run archives a day in the future.
MAX_WAIT = dt.timedelta(days=3)


class WaitForDayEnd(BaseOperator):
    """Defers until the run's archive day has ended plus ``settle_s`` seconds.

    ``source`` is the backend's registry name; its tasks' ``time_zone`` gives the zone of the
    day (from the connection ``conn_id`` or from its settings)."""

    ui_color = "#e6f2ff"

    def __init__(
        self, *, source: str, settle_s: int, conn_id: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.conn_id = conn_id
        self.settle_s = settle_s

    def execute(self, context: Any) -> None:
        from airflow.providers.standard.triggers.temporal import DateTimeTrigger

        from dxt_core.airflow.tasks import day_end

        end = day_end(self.source, context, self.conn_id, self.settle_s)
        now = dt.datetime.now(dt.UTC)
        if end <= now:
            log.info("the day was over at %s (settle delay %d s included)", end, self.settle_s)
            return
        if end - now > MAX_WAIT:
            raise ConfigError(
                f"this run archives a day that ends at {end.isoformat()}, more than "
                f"{MAX_WAIT.days} days from now: trigger it once the day is over"
            )
        log.info("waiting in the triggerer until %s (%.0f s)", end, (end - now).total_seconds())
        # end_from_trigger: the triggerer marks the task successful; no worker comes back.
        self.defer(
            trigger=DateTimeTrigger(moment=end, end_from_trigger=True),
            method_name="execute_complete",
            timeout=MAX_WAIT,
        )

    def execute_complete(self, context: Any, event: Any = None) -> None:
        log.info("the day is over: %s", event)
