"""What ``dxt coverage`` checks of its options and its archive before it looks at any day:
a root that is a directory holding the backend's units, no option of another backend, no
``--tz`` other than the zone the archive's days are cut in."""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Sequence
from typing import Any

from dxt_core.archive import Archive
from dxt_core.errors import ConfigError
from dxt_core.manifests import MANIFEST_SUFFIX


def check_root(archive: Archive) -> None:
    """Raise ConfigError unless a directory archive's root is a directory."""
    if archive.remote:
        return
    root = archive.root
    if not root.exists():
        raise ConfigError(f"archive root {root} does not exist: check --archive")
    if not root.is_dir():
        raise ConfigError(f"archive root {root} is not a directory: check --archive")


#: The coverage options that choose a backend's units (each backend declares some of them).
UNIT_OPTIONS = ("--catalog", "--format", "--sites", "--metrics", "--families")


def check_archive_holds(
    archive: Archive,
    source: str,
    units: Sequence[Sequence[str]],
    choosers: Sequence[str] = UNIT_OPTIONS,
) -> None:
    """Raise ConfigError unless ``archive`` holds something of ``source`` for ``units``.

    Without this, a mistyped --archive path reads as "everything missing" and the refill
    commands would ask to fetch it all again.
    """
    check_root(archive)
    if not archive.holds(source):
        where, lacks = (
            (archive.url, f"object under {archive.url}/{source}/")
            if archive.remote
            else (str(archive.root), f"*{MANIFEST_SUFFIX} under {archive.root / source}")
        )
        raise ConfigError(
            f"archive root {where} holds no {source} archive (no {lacks}): check --archive"
        )
    if archive.remote:
        return
    root = archive.root
    top = root / source
    if not any(root.joinpath(source, *parts).is_dir() for parts in units):
        example = f" (e.g. {root.joinpath(source, *units[0])})" if units else ""
        raise ConfigError(
            f"none of the {len(units)} units asked for has a directory under {top}{example}: "
            f"check the options that choose them ({', '.join(choosers)})"
        )


def check_backend_options(args: argparse.Namespace, backend: Any) -> None:
    """An option another backend's coverage declares, typed for this one, is an error (it
    was accepted and ignored: ``dxt coverage examon --sites lyon``)."""
    owners: dict[str, set[str]] = getattr(args, "option_owners", None) or {}
    for word in getattr(args, "given", []):
        if word == "--":
            break
        option = full_option(word.split("=", 1)[0], getattr(args, "option_strings", []))
        who = owners.get(option)
        if who and backend.command not in who:
            raise ConfigError(
                f"{option} is an option of 'dxt coverage {'/'.join(sorted(who))}', not of "
                f"'dxt coverage {backend.command}': drop it"
            )


def check_given_zone(args: argparse.Namespace, archive: Archive, source: str) -> None:
    """``--tz`` other than the zone the archive's days are cut in is an error: coverage and
    reconcile take each day in the zone it was archived in (``--tz UTC`` on a Rome archive
    was accepted and ignored)."""
    known = getattr(args, "option_strings", [])
    typed = any(
        full_option(w.split("=", 1)[0], known) == "--tz"
        for w in itertools.takewhile(lambda w: w != "--", getattr(args, "given", []))
    )
    found = archive.recorded_day_zone(source) if typed else None
    given = getattr(args, "conn_time_zone", None)
    if found is not None and given is not None and found[0] != given:
        raise ConfigError(
            f"--tz {given}: the {source} days of {archive.url} are cut in {found[0]} "
            f"({found[1]}); coverage takes each day in the zone it was archived in: drop --tz"
        )


def full_option(typed: str, known: Sequence[str]) -> str:
    """The option ``typed`` stands for: itself, or the one option it abbreviates (argparse
    takes a unique prefix: ``--site`` for ``--sites``)."""
    if typed in known or not typed.startswith("--"):
        return typed
    found = [o for o in known if o.startswith(typed)]
    return found[0] if len(found) == 1 else typed
