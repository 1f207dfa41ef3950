"""The Kwollect archive file (``DXT_KWOLLECT_CONFIG``) and variables: a string where a list
is expected was split into characters (20 one-letter metrics), a list of numbers gave a raw
TypeError, a file named ``ok.TOML`` was read as JSON, and time-zone errors did not say where
the zone came from. Now a string is a comma-separated list, as in the variables; anything else
is an error naming the file (or variable) and the key."""

from __future__ import annotations

import pytest

from dxt_core.backends.kwollect.connection import load_archive_config
from dxt_core.backends.kwollect.source import G5kNode
from dxt_core.errors import ConfigError


def _load(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path, load_archive_config({"DXT_KWOLLECT_CONFIG": str(path)})


def test_a_string_is_a_comma_separated_list_not_characters(tmp_path):
    _, cfg = _load(
        tmp_path,
        "k.toml",
        'metrics = "wattmetre_power_watt"\nnodes = "nova-1.lyon, nova-2.lyon"\n'
        'clusters = "lyon/nova"\n',
    )
    assert cfg.metrics == ("wattmetre_power_watt",)
    assert cfg.nodes == (G5kNode("lyon", "nova-1"), G5kNode("lyon", "nova-2"))
    assert cfg.clusters == (("lyon", "nova"),)


@pytest.mark.parametrize(
    ("key", "value"),
    [("metrics", "[1, 2]"), ("nodes", "[3]"), ("clusters", "{ a = 1 }"), ("metrics", '[""]')],
)
def test_a_list_of_non_names_names_the_file_and_the_key(tmp_path, key, value):
    path = tmp_path / "k.toml"
    other = 'nodes = ["nova-1.lyon"]\n' if key != "nodes" else ""
    path.write_text(f"{key} = {value}\n{other}")
    with pytest.raises(ConfigError) as err:
        load_archive_config({"DXT_KWOLLECT_CONFIG": str(path)})
    assert str(err.value).startswith(f"{path}: key {key!r} must be a list of names")


@pytest.mark.parametrize("name", ["ok.TOML", "ok.Toml"])
def test_the_toml_suffix_is_matched_in_any_case(tmp_path, name):
    _, cfg = _load(tmp_path, name, 'nodes = ["nova-1.lyon"]\ntime_zone = "UTC"\n')
    assert cfg.nodes == (G5kNode("lyon", "nova-1"),) and cfg.time_zone == "UTC"


def test_a_bad_node_or_cluster_names_the_file_and_the_key(tmp_path):
    path = tmp_path / "k.json"
    path.write_text('{"nodes": ["bad name!"]}')
    with pytest.raises(ConfigError, match=rf"^{path}: key 'nodes': node 'bad name!'"):
        load_archive_config({"DXT_KWOLLECT_CONFIG": str(path)})
    path.write_text('{"clusters": ["nova"]}')
    with pytest.raises(ConfigError, match=rf"^{path}: key 'clusters': cluster 'nova' must be"):
        load_archive_config({"DXT_KWOLLECT_CONFIG": str(path)})
    with pytest.raises(ConfigError, match=r"^DXT_KWOLLECT_CLUSTERS: cluster 'nova' must be"):
        load_archive_config({"DXT_KWOLLECT_CLUSTERS": "nova"})


def test_a_bad_time_zone_names_the_file_key_or_the_variable(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text('nodes = ["nova-1.lyon"]\ntime_zone = "Mars/X"\n')
    with pytest.raises(ConfigError) as err:
        load_archive_config({"DXT_KWOLLECT_CONFIG": str(path)})
    assert str(err.value).startswith(f"{path}: key 'time_zone': unknown time zone 'Mars/X'")
    env = {"DXT_KWOLLECT_NODES": "nova-1.lyon", "DXT_KWOLLECT_TIME_ZONE": "Mars/X"}
    with pytest.raises(ConfigError, match=r"^DXT_KWOLLECT_TIME_ZONE: unknown time zone"):
        load_archive_config(env)
    # the variable wins over the file, so a good one hides the file's bad zone
    env = {"DXT_KWOLLECT_CONFIG": str(path), "DXT_KWOLLECT_TIME_ZONE": "UTC"}
    assert load_archive_config(env).time_zone == "UTC"


def test_a_key_given_twice_in_json_is_refused_as_in_toml(tmp_path):
    path = tmp_path / "k.json"
    path.write_text('{"clusters": ["lyon/nova"], "clusters": ["nancy/gros"]}')
    with pytest.raises(ConfigError, match=r"cannot read it \(key 'clusters' given twice\)"):
        load_archive_config({"DXT_KWOLLECT_CONFIG": str(path)})
