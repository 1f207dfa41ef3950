"""Asset events: "day D of <source>/<group> is archived", for downstream DAGs.

One asset per source and group (Examon plugin, Kwollect site, collectd family), named
``dxt-archive/<source>/<group>`` with the URI ``dxt-archive://<source>/<group>``. Each archive
task declares its source's asset alias (``dxt-archive/<source>``) as outlet and adds one
event per metric-day to its group's asset, with ``source``, ``unit``, ``day``, ``status``,
``rows``, ``bytes`` and ``path`` (relative to the archive root) in the event's extra. The
groups are known only once the catalog is read, hence the alias. A DAG scheduled on
``archive_asset("examon", "ipmi_pub")`` runs after such events; see docs/ui.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow.sdk import Asset, AssetAlias

PREFIX = "dxt-archive"


def archive_asset(source: str, group: str) -> Asset:
    """The asset of one source and group, e.g. ``archive_asset("examon", "ipmi_pub")``.

    In the URI, ``%``, ``?`` and ``#`` of the group are percent-encoded: Airflow drops a
    URI's query and fragment, so plugins ``a?b``, ``a#b`` and ``a`` were one URI."""
    path = group.replace("%", "%25").replace("?", "%3F").replace("#", "%23")
    return Asset(name=f"{PREFIX}/{source}/{group}", uri=f"{PREFIX}://{source}/{path}")


def source_alias(source: str) -> AssetAlias:
    """The alias an archive task of ``source`` declares as its outlet."""
    return AssetAlias(name=f"{PREFIX}/{source}")


def relative_path(path: object, root: Path) -> str | None:
    """``path`` relative to the archive root (None for no file, or one outside the root)."""
    if not path:
        return None
    try:
        return Path(str(path)).resolve().relative_to(root).as_posix()
    except ValueError:
        return None


def emit_day_event(
    context: Mapping[str, Any],
    source: str,
    group: str,
    unit: str,
    report: Mapping[str, Any],
    path: str | None,
) -> None:
    """Add the event of one archived (or empty) metric-day to its group's asset, with what
    makes it other than plain (:meth:`dxt_core.archive_day.DayReport.caveats`: holes left,
    archived files replaced, archived before the day ended), for a downstream DAG to see."""
    extra = {
        "source": source,
        "unit": unit,
        "day": report.get("day"),
        "status": report.get("status"),
        "rows": report.get("rows"),
        "bytes": report.get("bytes"),
        "path": path,
    }
    from dxt_core.archive_day import caveats  # at run time: the DAG files parse without it

    extra.update(caveats(report))
    context["outlet_events"][source_alias(source)].add(archive_asset(source, group), extra=extra)
