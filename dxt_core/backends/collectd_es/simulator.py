"""The collectd-in-Elasticsearch simulator: noida-db as a local Elasticsearch 8.15
(:mod:`~dxt_core.backends.collectd_es.noida`, with the bulk loader) and the version stand-in
in front of it (:mod:`~dxt_core.backends.collectd_es.standin`), run as ``python -m
dxt_core.backends.collectd_es.simulator --upstream URL --as opensearch-2.11.1`` (``dxt
simulate collectd-es``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson

from dxt_core.backends.collectd_es.noida import (
    COLLECTD_MAPPINGS,
    bulk_load,
    noida_binary,
    spawn_noida_elasticsearch,
)
from dxt_core.backends.collectd_es.standin import (
    STANDIN_FLAVOURS,
    Flavour,
    StandinHandler,
    StandinState,
    serve_standin,
    spawn_es_standin,
)
from dxt_core.errors import DxtError
from dxt_core.simulate.serving import port_number

__all__ = [
    "COLLECTD_MAPPINGS",
    "STANDIN_FLAVOURS",
    "Flavour",
    "StandinHandler",
    "StandinState",
    "bulk_load",
    "load_hits",
    "main",
    "noida_binary",
    "serve_standin",
    "spawn_es_standin",
    "spawn_noida_elasticsearch",
]


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="dxt simulate collectd-es",
        description="Answer as another Elasticsearch/OpenSearch version in front of noida-db. "
        "noida-db is a development dependency, not installed with dxt-archive: pip install "
        "noida-db (or pip install -e '.[dev]' in a checkout), then start it with 'noida-db "
        "start --only elasticsearch' (docs/collectd_es.md) and give its URL as --upstream.",
    )
    p.add_argument("--upstream", required=True, help="noida-db URL")
    p.add_argument(
        "--as",
        dest="flavour",
        choices=STANDIN_FLAVOURS,
        help="the version to answer as (required unless --load only loads)",
    )
    p.add_argument(
        "--load",
        metavar="FILE",
        help="first bulk-load FILE into the upstream: pages of search hits as JSON, gzip or "
        "not (pytokio's archive_collectdes output, e.g. sample_collectdes-full.json.gz); "
        "without --as, load and exit",
    )
    p.add_argument("--port", type=port_number, default=0, help="port (default 0: a free one)")
    p.add_argument("--user", help="require Basic auth (password in DXT_STANDIN_PASSWORD)")
    a = p.parse_args(argv)
    if a.load is None and a.flavour is None:
        p.error("give --as FLAVOUR (to serve), --load FILE (to load), or both")
    if a.load is not None:
        try:
            n = bulk_load(a.upstream, load_hits(Path(a.load)))
        except (DxtError, OSError, ValueError, httpx.HTTPError) as exc:
            print(f"dxt simulate collectd-es: {exc}", file=sys.stderr)
            return 2
        print(f"loaded {n} documents from {a.load} into {a.upstream}", flush=True)
        if a.flavour is None:
            return 0
    password = os.environ.get("DXT_STANDIN_PASSWORD") if a.user else None
    return serve_standin(a.upstream, a.flavour, a.port, a.user, password).run_until_signal()


def load_hits(path: Path) -> list[dict[str, Any]]:
    """The hits of a file of search-result pages (a JSON list of lists of hits, gzip or
    not), as pytokio's ``archive_collectdes`` writes them."""
    import gzip

    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    pages = orjson.loads(raw)
    if not isinstance(pages, list) or not all(isinstance(p, list) for p in pages):
        raise ValueError(f"{path}: expected a JSON list of pages (lists of hits)")
    return [h for page in pages for h in page]


if __name__ == "__main__":
    sys.exit(main())
