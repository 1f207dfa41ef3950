from pathlib import Path

import pytest

from dxt_core.backends.examon.catalog import (
    CatalogEntry,
    ExamonOptions,
    load_catalog,
    parse_catalog,
    select,
)
from dxt_core.errors import CatalogError, ConfigError


def test_shipped_catalog_is_the_m100_one():
    entries = load_catalog()
    assert len(entries) == 811
    plugins = {}
    for e in entries:
        plugins[e.plugin] = plugins.get(e.plugin, 0) + 1
    assert plugins == {
        "ganglia_pub": 409,
        "schneider_pub": 164,
        "ipmi_pub": 105,
        "slurm_pub": 55,
        "logics_pub": 39,
        "vertiv_pub": 25,
        "weather_pub": 10,
        "nagios_pub": 3,
        "job_table": 1,
    }
    assert CatalogEntry("job_info_marconi100", "job_table") in entries


def test_old_name_header_is_accepted(tmp_path: Path):
    import importlib.resources

    text = importlib.resources.files("dxt_core.data").joinpath("M100_metrics_1891.csv").read_text()
    assert text.startswith("name,plugin")
    # The file holds 1,891 metrics (its last line has no newline, so wc -l says 1,891 lines).
    assert len(parse_catalog(text)) == 1891


def test_comments_blank_lines_and_bom():
    entries = parse_catalog("\ufeffmetric,plugin\n# a comment\n\nambient,ipmi_pub\n")
    assert entries == [CatalogEntry("ambient", "ipmi_pub")]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("metric,kind\na,b\n", 1, "'plugin' column"),
        ("metric,plugin\na\n", 2, "expected 2 columns"),
        ("metric,plugin\n,ipmi_pub\n", 2, "empty metric name"),
        ("metric,plugin\nx,\n", 2, "empty plugin name"),
        ("metric,plugin\na,p\nb,p\na,p\n", 4, "duplicate of line 2"),
        ("metric,plugin\n..,p\n", 2, "escape the archive"),
        ("metric,plugin\na/b,p\n", 2, "'/'"),
        ("metric,plugin\nok,../etc\n", 2, "'/'"),
        ("metric,plugin\na\x00b,p\n", 2, "'\\x00'"),
        # names a Hive reader or the archive's own listings would take for another
        ("metric,plugin\ntemp,plugin=p1\n", 2, "contains '=' (a Hive partition's separator"),
        ("metric,plugin\nx=y,p\n", 2, "contains '='"),
        ("metric,plugin\na%20b,p\n", 2, "contains '%' (decoded by Hive readers"),
        ("metric,plugin\n.hidden,p\n", 2, "starts with '.'"),
        (f"metric,plugin\n{'m' * 230},p\n", 2, "at most 229 bytes"),
        ("metric,plugin\n", 1, "no metrics"),
    ],
)
def test_bad_catalogs_name_file_and_line(text, line, fragment):
    with pytest.raises(CatalogError) as ei:
        parse_catalog(text, "cat.csv")
    assert ei.value.line == line
    assert f"cat.csv, line {line}" in str(ei.value)
    assert fragment in str(ei.value)


def test_a_line_over_the_csv_modules_limit_names_its_line():
    with pytest.raises(CatalogError, match=r"cat.csv, line 3: not a CSV line: field larger"):
        parse_catalog(f"metric,plugin\na,p\n{'x' * 140_000},p\n", "cat.csv")


def test_the_longest_name_leaves_room_for_the_files_made_of_it():
    # .metric=<metric>.json.XXXXXXXX.tmp (the tag-key cache's temporary file, Parquet) is
    # 26 bytes longer: archived in both formats (tests/integration/examon/test_cli.py)
    [e] = parse_catalog(f"metric,plugin\n{'m' * 229},{'p' * 229}\n")
    assert len(e.metric) == len(e.plugin) == 229


def test_missing_and_non_utf8_files(tmp_path: Path):
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "nope.csv")
    p = tmp_path / "latin1.csv"
    p.write_bytes(b"metric,plugin\ncaf\xe9,p\n")
    with pytest.raises(CatalogError, match=r"line 2: not valid UTF-8"):
        load_catalog(p)


def test_select_keeps_order():
    entries = parse_catalog("metric,plugin\na,x\nb,y\nc,x\n")
    assert [e.metric for e in select(entries, plugins=["x"])] == ["a", "c"]
    assert [e.metric for e in select(entries, limit=2)] == ["a", "b"]


def test_plugin_options_defaults_and_toml(tmp_path: Path):
    o = ExamonOptions()
    assert o.for_plugin("ipmi_pub").cluster_tag
    assert not o.for_plugin("schneider_pub").cluster_tag
    assert o.for_plugin("job_table").job_table
    p = tmp_path / "o.toml"
    p.write_text('cluster = "leonardo"\n[plugins.schneider_pub]\ncluster_tag = true\n')
    o2 = ExamonOptions.from_toml(p)
    assert o2.cluster == "leonardo"
    assert o2.for_plugin("schneider_pub").cluster_tag
    assert o2.for_plugin("ipmi_pub").cluster_tag
    p.write_text("[plugins.x]\nclustertag = true\n")
    with pytest.raises(ConfigError, match="unknown key"):
        ExamonOptions.from_toml(p)


@pytest.mark.parametrize(
    ("toml", "fragment"),
    [
        ('[plugins.ipmi_pub]\ncolumn_types = { a = "int64" }\n', "only a job table"),
        ('[plugins.j]\njob_table = true\ncolumn_types = "int64"\n', "must be a table"),
        (
            '[plugins.j]\njob_table = true\ncolumn_types = { a = "integer" }\n',
            "plugins.j.column_types.a must be one of bool, double, int64, string",
        ),
    ],
)
def test_job_table_column_types_are_checked(tmp_path: Path, toml, fragment):
    p = tmp_path / "opts.toml"
    p.write_text(toml)
    with pytest.raises(ConfigError) as err:
        ExamonOptions.from_toml(p)
    assert fragment in str(err.value) and str(p) in str(err.value)


def test_job_table_column_types_are_read(tmp_path: Path):
    p = tmp_path / "opts.toml"
    p.write_text(
        '[plugins.j]\njob_table = true\n[plugins.j.column_types]\nb = "bool"\na = "int64"\n'
    )
    assert ExamonOptions.from_toml(p).for_plugin("j").column_types == (
        ("a", "int64"),
        ("b", "bool"),
    )


def test_an_unclosed_quote_names_the_line_it_opens_on(tmp_path):
    p = tmp_path / "quote.csv"
    p.write_text('metric,plugin\n"Gpu0_bar1_free,ganglia_pub\nambient,ipmi_pub\n')
    with pytest.raises(CatalogError) as err:
        load_catalog(p)
    assert err.value.line == 2
    assert "the '\"' that opens line 2 is not closed (the field runs to line 3)" in str(err.value)


def test_unknown_top_level_option_keys_are_refused(tmp_path):
    """A typo ('clustr') left the cluster at marconi100: every cluster-tagged metric-day of
    another cluster archived empty, and counted complete."""
    p = tmp_path / "options.toml"
    p.write_text('clustr = "leonardo"\n[plugin.my_jobs]\njob_table = true\n')
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['clustr', 'plugin'\]"):
        ExamonOptions.from_toml(p)


def test_plugin_options_naming_no_catalog_plugin_are_warned_of(tmp_path, monkeypatch, caplog):
    """A typo in [plugins.<name>] left that plugin's defaults in silence."""
    from dxt_core.backends.examon.catalog import ExamonOptions
    from dxt_core.backends.examon.tasks import ExamonTasks

    opts = tmp_path / "opts.toml"
    opts.write_text("[plugins.ganglia_pb]\ncluster_tag = true\n[plugins.ipmi_pub]\n")
    catalog = tmp_path / "c.csv"
    catalog.write_text("metric,plugin\na,ganglia_pub\nb,ipmi_pub\n")
    said = ExamonOptions.from_toml(opts).unused_plugins(load_catalog(catalog))
    assert said == (
        f"{opts}: no catalog metric belongs to plugin(s) 'ganglia_pb' (closest: ganglia_pub): "
        "their options are not used; check the [plugins.<name>] spelling"
    )
    assert ExamonOptions().unused_plugins(load_catalog(catalog)) == ""  # defaults: not named
    monkeypatch.setenv("DXT_EXAMON_OPTIONS", str(opts))
    monkeypatch.setenv("DXT_EXAMON_CATALOG", str(catalog))
    with caplog.at_level("WARNING"):
        units = ExamonTasks().units(lambda: None, None)
    assert len(units) == 2 and "'ganglia_pb' (closest: ganglia_pub)" in caplog.text
