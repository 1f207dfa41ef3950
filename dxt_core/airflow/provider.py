"""Provider metadata: dxt-archive's connection types, their forms, and its ``[dxt]`` settings.

Loaded through the ``apache_airflow_provider`` entry point of the ``dxt-archive``
distribution. Everything is derived from the backend registry: each backend's connection spec
gives its connection type and form (``conn-fields``, declared rather than coded), and the
settings give the ``[dxt]`` configuration section. Keep it import-light (no Airflow import).
"""

from __future__ import annotations

from typing import Any

from dxt_core import masking
from dxt_core._version import __version__
from dxt_core.config import ARCHIVE_ROOT, Setting

_TYPES = {str: "string", int: "integer", float: "float", bool: "boolean", list: "string"}


def _option(s: Setting) -> dict[str, Any]:
    default = s.default
    if isinstance(default, list):
        default = ",".join(default)
    elif isinstance(default, bool):
        default = str(default).lower()
    return {
        "description": f"{s.help}. The environment variable {s.env} wins over this option.",
        "version_added": None,
        "type": _TYPES[s.kind],
        "example": None,
        "default": None if default in ("", None) else str(default),
    }


def get_provider_info() -> dict[str, Any]:
    from dxt_core.backends import backends, builtin_backends
    from dxt_core.errors import DxtError

    try:
        found = backends()
    except DxtError as exc:
        # a wrong DXT_EXTRA_BACKENDS must not stop every Airflow command (Airflow reads this
        # when it starts): the built-in backends, and the error said; a DAG of the extra
        # backend fails to import with the same error, where the UI shows it
        masking.logger("dxt_core.airflow.provider").error("%s", exc)
        found = builtin_backends()
    options = {ARCHIVE_ROOT.key: _option(ARCHIVE_ROOT)}
    for b in found:
        options.update({s.key: _option(s) for s in b.settings})
    return {
        "package-name": "dxt-archive",
        "name": "dxt-archive",
        "description": "Archive HPC monitoring telemetry ("
        + ", ".join(b.title for b in found)
        + ") into a plain, compressed, verifiable file archive.",
        "versions": [__version__],
        "connection-types": [b.spec.provider_entry(b.hook) for b in found if b.has_connection()],
        "config": {
            "dxt": {
                "description": "dxt-archive settings. Each option can also be set with its "
                "DXT_<OPTION> environment variable, which wins.",
                "options": options,
            }
        },
    }
