"""The ``dxt_promrange`` DAG without Airflow: one unit per metric of ``DXT_PROMRANGE_METRICS``,
UTC days."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from dxt_core.archive import Archive
from dxt_core.archive_day import DayReport
from dxt_core.backends.roles import BackendTasks, Unit
from tests.toy_backend.promrange.connection import PromConnection


class PromRangeTasks(BackendTasks[PromConnection]):
    backend = "promrange"
    group = "metric"
    units_task_id = None  # the metrics are a setting: mapped at parse time
    map_index_template = "{{ task.op_kwargs['unit'] }}"
    tags = ("prometheus",)

    def configured_units(self) -> list[Unit]:
        return [m.strip() for m in self.settings()["metrics"] if m.strip()]

    def unit_name(self, unit: Unit) -> str:
        return str(unit)

    def asset_group(self, unit: Unit) -> str:
        return str(unit)

    def configured_parts(self) -> list[tuple[str, ...]]:
        return [(str(m),) for m in self.configured_units()]

    def archive(
        self,
        unit: Unit,
        day: dt.date,
        archive: Archive,
        conn: PromConnection,
        params: Mapping[str, Any],
    ) -> DayReport:
        from tests.toy_backend.promrange.archive_day import archive_promrange_day
        from tests.toy_backend.promrange.source import PromRangeSource

        with PromRangeSource(conn) as source:
            return archive_promrange_day(source, str(unit), day, archive)


TASKS = PromRangeTasks()
