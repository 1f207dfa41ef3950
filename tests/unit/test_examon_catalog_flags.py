"""``dxt extract examon``: one metric (``--metric M --plugin P``) or a catalog (``--catalog``,
narrowed by ``--plugins`` and ``--limit``), never both: the command refuses the mix (exit 2,
naming what to drop) before it asks the server anything, as ``dxt extract prometheus`` refuses
``--catalog`` with ``--metrics``. Before, the catalog options were silently ignored."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from dxt_core.backends.examon.catalog import CatalogEntry
from dxt_core.backends.examon.cli import _entries, add_extract_parser
from dxt_core.cli import main
from dxt_core.errors import ConfigError

DOWN = "http://127.0.0.1:9"  # nothing listens: a run that asked the server would exit 4


def parse(*words: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_extract_parser(parser.add_subparsers())
    return parser.parse_args(
        ["examon", "--url", DOWN, "--start-day", "2020-03-09", "--archive", "a", *words]
    )


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.csv"
    path.write_text("metric,plugin\nambient,ipmi_pub\nstate,nagios_pub\ntemp,ipmi_pub\n")
    return path


@pytest.mark.parametrize(
    ("extra", "drop"),
    [
        (("--catalog", "CATALOG"), "drop --catalog, or drop --metric and --plugin"),
        (("--plugins", "ipmi_pub"), "drop --plugins, or drop --metric and --plugin"),
        (("--limit", "1"), "drop --limit, or drop --metric and --plugin"),
        (
            ("--catalog", "CATALOG", "--plugins", "ipmi_pub", "--limit", "0"),
            "drop --catalog and --plugins and --limit, or drop --metric and --plugin",
        ),
    ],
)
def test_one_metric_with_catalog_options_is_refused(
    extra: tuple[str, ...],
    drop: str,
    catalog: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    archive = tmp_path / "archive"
    words = [str(catalog) if w == "CATALOG" else w for w in extra]
    argv = ["extract", "examon", "--url", DOWN, "--metric", "ambient", "--plugin", "ipmi_pub"]
    argv += [*words, "--start-day", "2020-03-09", "--archive", str(archive), "--retries", "0"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--metric and --plugin name one metric instead of a catalog" in err
    assert drop + " to archive the catalog" in err
    assert not archive.exists()  # refused before anything was made or asked


def test_plugin_alone_with_a_catalog_names_only_plugin_to_drop(catalog: Path) -> None:
    with pytest.raises(ConfigError, match=r"drop --catalog, or drop --plugin to archive"):
        _entries(parse("--plugin", "ipmi_pub", "--catalog", str(catalog)))


def test_one_metric_or_a_catalog_alone_still_work(catalog: Path) -> None:
    assert _entries(parse("--metric", "ambient", "--plugin", "ipmi_pub")) == [
        CatalogEntry("ambient", "ipmi_pub")
    ]
    assert _entries(parse("--catalog", str(catalog), "--plugins", "ipmi_pub")) == [
        CatalogEntry("ambient", "ipmi_pub"),
        CatalogEntry("temp", "ipmi_pub"),
    ]
    assert _entries(parse("--catalog", str(catalog), "--limit", "1")) == [
        CatalogEntry("ambient", "ipmi_pub")
    ]
    with pytest.raises(ConfigError, match="--metric and --plugin go together"):
        _entries(parse("--metric", "ambient"))


def test_help_says_metric_does_not_go_with_the_catalog_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["extract", "examon", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "one metric (with --plugin) instead of a catalog: not with --catalog, --plugins" in out
