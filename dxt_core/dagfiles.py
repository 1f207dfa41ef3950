"""``dxt dags write``: the DAG files of the built-in backends and of ``dxt_publish``, written
into an Airflow DAG folder.

An installed package (a wheel, ``pip install dxt-archive``) holds no ``dags/`` folder; each
DAG file is one call, and its documentation (the DAG's Docs tab) comes from the package
(``dag_doc`` of the backend's tasks role, ``DAG_DOC`` of :mod:`dxt_core.airflow.publish`),
so this writes the same files as the checkout's ``dags/`` (a test compares them byte for
byte). It never imports Airflow. A file that differs from what it would write is kept
unless ``--force``, which keeps the old one beside it as ``<name>.py.bak``.
"""

from __future__ import annotations

import argparse
import configparser
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dxt_core import backends as registry
from dxt_core.errors import ConfigError
from dxt_core.fsio import atomic_file

_TEMPLATE = '''"""{dag_id}: {what}

Its documentation (the DAG's Docs tab) comes from the installed dxt-archive:
{where}.
Written by ``dxt dags write``; write it again after an upgrade.
"""

from __future__ import annotations

from {module} import {function}

{function}({args})
'''


def dag_files() -> dict[str, str]:
    """File name -> text of each DAG file: the built-in backends' (``dxt_<name>.py``), then
    ``dxt_publish.py``."""
    out: dict[str, str] = {}
    for name in registry.BUILTIN:
        b = registry.get(name)
        if b.tasks is None:
            continue
        dag_id = b.dag_id or f"dxt_{b.name}"
        out[f"{dag_id}.py"] = _TEMPLATE.format(
            dag_id=dag_id,
            what=f"the DAG of the {b.command} backend, one task per unit and day.",
            where=f"dag_doc of {b.package}.tasks",
            module="dxt_core.airflow.dags",
            function="backend_dag",
            args=f'"{b.name}"',
        )
    out["dxt_publish.py"] = _TEMPLATE.format(
        dag_id="dxt_publish",
        what="publish each month of the archive once it is complete.",
        where="DAG_DOC of dxt_core.airflow.publish",
        module="dxt_core.airflow.publish",
        function="publish_dag",
        args="",
    )
    return out


def default_folder() -> Path:
    """Airflow's DAG folder, as Airflow finds it (:func:`airflow_dags_folder`)."""
    return airflow_dags_folder()[0]


def _expand(value: str) -> str:
    """``$VARS`` and ``~`` expanded until nothing changes, as Airflow's ``expand_env_var``
    does to the environment variable and to the config file's value."""
    while True:
        expanded = os.path.expanduser(os.path.expandvars(value))
        if expanded == value:
            return expanded
        value = expanded


def airflow_dags_folder() -> tuple[Path, str]:
    """Airflow's DAG folder and where it was found, in Airflow's own precedence:
    ``AIRFLOW__CORE__DAGS_FOLDER``; else ``[core] dags_folder`` of the config file
    (``$AIRFLOW_CONFIG``, else ``$AIRFLOW_HOME/airflow.cfg``); else ``$AIRFLOW_HOME/dags``
    (``AIRFLOW_HOME`` defaults to ``~/airflow``). Read without importing Airflow.

    Raises:
        ConfigError: the config file exists but cannot be read or parsed, or its value
            holds ``{AIRFLOW_HOME}``, which Airflow 3 reads literally.
    """
    given = os.environ.get("AIRFLOW__CORE__DAGS_FOLDER", "").strip()
    if given:
        return Path(_expand(given)), "from AIRFLOW__CORE__DAGS_FOLDER"
    home = _expand(os.environ.get("AIRFLOW_HOME", "").strip() or "~/airflow")
    config = os.environ.get("AIRFLOW_CONFIG")
    cfg = Path(_expand(config) if config is not None else os.path.join(home, "airflow.cfg"))
    value = _config_dags_folder(cfg)
    if value:
        return Path(value), f"from [core] dags_folder in {cfg}"
    return Path(home) / "dags", f"the default, $AIRFLOW_HOME/dags ({cfg} sets no dags_folder)"


def _config_dags_folder(cfg: Path) -> str | None:
    """``[core] dags_folder`` of Airflow's config file, expanded as Airflow does (``%(...)s``
    interpolation, then ``$VARS`` and ``~``); None when the file or the option is absent."""
    if not cfg.is_file():
        return None
    parser = configparser.ConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # as Airflow: case kept
    try:
        with cfg.open(encoding="utf-8") as fh:
            parser.read_file(fh)
        value = parser.get("core", "dags_folder", fallback=None)
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        problem = exc.strerror if isinstance(exc, OSError) else str(exc).splitlines()[0]
        raise ConfigError(
            f"cannot read Airflow's config file {cfg}: {problem}; fix it, or give the DAG "
            "folder with --to (or AIRFLOW__CORE__DAGS_FOLDER)"
        ) from None
    if value is None or not value.strip():
        return None
    if "{AIRFLOW_HOME}" in value:
        raise ConfigError(
            f"{cfg}: [core] dags_folder = {value.strip()!r}: Airflow 3 does not replace "
            "{AIRFLOW_HOME} in its config file (it would look in a folder of that name); "
            "write the path, or $AIRFLOW_HOME/..., or give the DAG folder with --to"
        )
    return _expand(value.strip())


@dataclass
class Written:
    """What a write did, file by file."""

    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # old text kept as <name>.bak
    kept: list[str] = field(default_factory=list)  # differs, not replaced (no --force)


def write_dag_files(folder: Path, force: bool = False) -> Written:
    """Write :func:`dag_files` into ``folder`` (made if missing)."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is not a directory: give a DAG folder with --to")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot make the DAG folder {folder}: {exc.strerror}") from exc
    done = Written()
    for name, text in dag_files().items():
        path, data = folder / name, text.encode()
        try:
            old = path.read_bytes() if path.exists() else None
            if old == data:
                done.unchanged.append(name)
                continue
            if old is not None and not force:
                done.kept.append(name)
                continue
            if old is not None:
                _write(path.with_name(name + ".bak"), old)
            _write(path, data)
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror}") from exc
        (done.written if old is None else done.replaced).append(name)
    return done


def _write(path: Path, data: bytes) -> None:
    with atomic_file(path) as fh:
        fh.write(data)


def cmd_dags_write(args: argparse.Namespace) -> int:
    if args.to:
        folder, why = Path(args.to).expanduser(), "from --to"
    else:
        folder, why = airflow_dags_folder()
    print(f"DAG folder {folder} ({why})")
    done = write_dag_files(folder, force=args.force)
    for name in done.written:
        print(f"wrote {folder / name}")
    for name in done.replaced:
        print(f"replaced {folder / name} (the old file is {name}.bak)")
    for name in done.kept:  # a diagnostic, on stderr as extract's FAILED lines
        print(
            f"KEPT {folder / name}: it differs from this version's; --force replaces it",
            file=sys.stderr,
        )
    print(
        f"{len(done.written)} written, {len(done.replaced)} replaced, "
        f"{len(done.unchanged)} unchanged, {len(done.kept)} kept as they were, in {folder}"
    )
    return 1 if done.kept else 0


def add_dags_parser(sub: Any) -> None:
    """``dxt dags write [--to DIR] [--force]``."""
    d = sub.add_parser(
        "dags",
        help="write the DAG files into an Airflow DAG folder (for an installed package)",
        description="The DAG files of the built-in backends and of dxt_publish, one call each "
        "(their documentation comes from the installed package). 'write' puts them into "
        "Airflow's DAG folder: after 'pip install dxt-archive[airflow]', and again after an "
        "upgrade.",
    )
    actions = d.add_subparsers(dest="action", required=True)
    w = actions.add_parser(
        "write",
        help="write the DAG files (those already there and equal are left alone)",
        description="Write the DAG files into --to, default Airflow's DAG folder as Airflow "
        "finds it: AIRFLOW__CORE__DAGS_FOLDER, else [core] dags_folder in $AIRFLOW_CONFIG "
        "(default $AIRFLOW_HOME/airflow.cfg), else $AIRFLOW_HOME/dags (AIRFLOW_HOME "
        "defaults to ~/airflow); the first line says which folder and why. A file that "
        "differs from this version's is kept and named (exit status 1) unless --force, "
        "which keeps the old one as <name>.py.bak.",
    )
    w.add_argument("--to", help="the DAG folder (made if missing)")
    w.add_argument("--force", action="store_true", help="replace files that differ")
    w.set_defaults(func=cmd_dags_write)
