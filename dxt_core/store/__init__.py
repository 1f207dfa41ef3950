"""Where an archive lives: a local (or NFS, GPFS, Lustre) directory, or an S3 bucket.

An archive root is either a path or a URL. ``s3://bucket/prefix`` selects the object-store
archive (:mod:`dxt_core.store.s3`); ``file:///path`` and plain paths the directory archive
(:mod:`dxt_core.archive`). Any other scheme (``gs://``, ``foo://``) is a
:class:`~dxt_core.errors.ConfigError`: a URL is never taken for a folder name (``Path``
would turn ``s3://dxt/m100`` into ``./s3:/dxt/m100`` and write there).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from dxt_core.errors import ConfigError
from dxt_core.urls import redact_value

#: Schemes an archive root may have.
SCHEMES = ("s3", "file")

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/")
# S3's rules for bucket names (3 to 63 lower-case letters, digits, dots and hyphens,
# beginning and ending with a letter or digit).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True, slots=True)
class S3Location:
    """``s3://<bucket>/<prefix>``: the prefix without leading or trailing slashes."""

    bucket: str
    prefix: str = ""

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def key(self, relative: str) -> str:
        """The object key of ``relative`` (a ``/``-separated path inside the archive)."""
        relative = relative.strip("/")
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def __str__(self) -> str:
        return self.url


def parse_root(root: str | os.PathLike[str], what: str = "archive root") -> Path | S3Location:
    """The archive root ``root`` names: a local path or an S3 location (``what``: the
    thing named, as messages say it: a publication's output is not an archive root).

    Raises:
        ConfigError: an unknown scheme, a malformed ``s3://`` URL or an empty root; the
            message names the root and the schemes that work.
    """
    if isinstance(root, S3Location):
        return root
    text = os.fspath(root).strip()
    if not text:
        fix = ": set DXT_ARCHIVE_ROOT or pass --archive DIR" if what == "archive root" else ""
        raise ConfigError(f"{what} is empty{fix}")
    m = _SCHEME.match(text)
    if m is None:
        return Path(text)
    scheme = m.group(1).lower()
    shown = redact_value(text)  # the root as messages quote it: never its credentials
    if len(scheme) == 1 and os.name == "nt":  # pragma: no cover - a drive letter
        return Path(text)
    if not text[m.end() :].startswith("/"):
        raise ConfigError(
            f"{what} {shown!r} looks like a URL with one slash after {scheme}:; write "
            f"{scheme}://... (a shell or Path() may have dropped one), or a local path"
        )
    if shown != text:
        raise ConfigError(
            f"{what} {shown!r}: a URL here holds no credentials; set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or the Airflow "
            "connection DXT_S3_CONN_ID names)"
        )
    if scheme == "file":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise ConfigError(f"{what} {shown!r}: file:// URLs name a local path only")
        return Path(unquote(parts.path))
    if scheme != "s3":
        raise ConfigError(
            f"{what} {shown!r}: unknown scheme {scheme}://; it is a local path, "
            "file:///path or s3://bucket/prefix (S3, Ceph RGW, MinIO)"
        )
    parts = urlsplit(text)
    bucket = parts.netloc
    if parts.query or parts.fragment:
        raise ConfigError(f"{what} {shown!r}: an s3:// URL has no ?query or #fragment")
    if not _BUCKET.match(bucket):
        raise ConfigError(
            f"{what} {shown!r}: {bucket!r} is not a valid bucket name (3 to 63 lower-case "
            "letters, digits, dots and hyphens)"
        )
    prefix = unquote(parts.path).strip("/")
    if any(p in ("", ".", "..") for p in prefix.split("/")) and prefix:
        raise ConfigError(f"{what} {shown!r}: the prefix has an empty, . or .. part")
    require_s3_extra()
    return S3Location(bucket, prefix)


#: The first boto3 (and botocore: boto3 X.Y.Z requires botocore X.Y.*) whose client takes the
#: Config options :mod:`dxt_core.store.client` sets (pyproject.toml's ``s3`` extra).
BOTO3_MINIMUM = (1, 36, 0)
_s3_extra_found = False


def require_s3_extra() -> None:
    """Raise a run-wide ConfigError unless boto3 (the ``s3`` extra) is installed and recent
    enough, so an s3:// root fails at once with the fix, not with a ``botocore`` traceback
    at the first request of every unit. Cheap: botocore's top-level import (about 1 ms) and
    a look for boto3 (not imported: 0.2 s, paid at the first commit)."""
    global _s3_extra_found
    if _s3_extra_found:
        return
    problem = _s3_extra_problem()
    if problem is not None:
        error = ConfigError(f"s3:// archive roots need boto3: {problem}")
        error.run_wide = True  # every unit of the run would fail the same way
        raise error
    _s3_extra_found = True


def _s3_extra_problem() -> str | None:
    install = "pip install 'dxt-archive[s3]'"
    try:
        import botocore
    except ModuleNotFoundError as exc:
        if (exc.name or "botocore").partition(".")[0] == "botocore":
            return install
        return f"botocore failed to import ({type(exc).__name__}: {exc}); {install}"
    except ImportError as exc:
        return f"botocore failed to import ({type(exc).__name__}: {exc}); {install}"
    if importlib.util.find_spec("boto3") is None:
        return install
    version = str(getattr(botocore, "__version__", ""))
    numbers = tuple(int(p) for p in re.findall(r"\d+", version)[:3])
    if numbers and numbers < BOTO3_MINIMUM:
        want = ".".join(map(str, BOTO3_MINIMUM))
        return (
            f"{want} or later (botocore {version} is installed, without the checksum "
            f"options the client sets): pip install -U 'dxt-archive[s3]'"
        )
    return None


def is_url(root: object) -> bool:
    """``root`` is an archive URL other than ``file://`` (that is, an object store)."""
    if isinstance(root, S3Location):
        return True
    if not isinstance(root, (str, os.PathLike)):
        return False
    return isinstance(parse_root(root), S3Location)


#: Makes the S3 client of an archive when none is given (None: the standard AWS environment).
#: dxt_core.airflow sets one that reads an Airflow connection.
_client_factory: Callable[[S3Location], Any] | None = None


def set_client_factory(factory: Callable[[S3Location], Any] | None) -> None:
    """Use ``factory(location)`` for the S3 clients of archives made without one; it may
    return None to fall back to the standard AWS environment."""
    global _client_factory
    _client_factory = factory


def client_factory() -> Callable[[S3Location], Any] | None:
    return _client_factory
