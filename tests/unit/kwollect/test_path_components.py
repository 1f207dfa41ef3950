"""Every name that becomes a path component (backup, archive, API URL) is checked first.

Issue 12.3: ``--job "../../x:1"`` and ``site=`` in the library wrote outside the backup
directory. The one shared check is :func:`dxt_core.paths.check_path_component`.
"""

from __future__ import annotations

import datetime as dt

import httpx
import pytest

from dxt_core import Archive
from dxt_core.backends.kwollect.archive_day import archive_kwollect_day
from dxt_core.backends.kwollect.connection import KwollectArchiveConfig
from dxt_core.backends.kwollect.experiment import Kwollect
from dxt_core.backends.kwollect.source import KwollectClient, parse_node, sites_path
from dxt_core.errors import ConfigError, SourceError

UTC = dt.UTC
T0 = dt.datetime(2024, 11, 26, 14, 0, tzinfo=UTC)


def _no_request(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"no request may be sent, got {request.url}")


NO_SERVER = httpx.MockTransport(_no_request)


@pytest.mark.parametrize("site", ["../../x", "..", "a/b", "lyon\\x", ""])
def test_a_site_that_would_escape_is_refused_before_any_request(site, tmp_path):
    with pytest.raises(ConfigError, match="site"):
        parse_node("nova-1", site)
    with pytest.raises(ConfigError, match="site"):
        Kwollect(["nova-1"], site=site, api_url="http://kwollect.test", transport=NO_SERVER)
    with pytest.raises(ConfigError, match="site"):
        Kwollect.from_job(site, 1, api_url="http://kwollect.test", transport=NO_SERVER)
    with pytest.raises(ConfigError):
        sites_path(site, "metrics")
    assert not any(tmp_path.iterdir())


def test_a_site_inside_a_node_name_is_checked_too():
    # "nova-1.." has an empty site; "nova-1../" cannot be a host name either
    with pytest.raises(ConfigError):
        parse_node("nova-1..")


def test_job_ids_must_be_numbers():
    client = KwollectClient("http://kwollect.test", transport=NO_SERVER)
    with pytest.raises(ConfigError, match="OAR job number"):
        client.job("lyon", "1/../../x")


def test_metric_names_are_checked_in_the_daily_archive_and_its_configuration(tmp_path):
    client = KwollectClient("http://kwollect.test", transport=NO_SERVER)
    archive = Archive(tmp_path / "a")
    with pytest.raises(ConfigError, match="metric"):
        archive_kwollect_day(client, "lyon", "../m", ["nova-1"], T0.date(), archive)
    with pytest.raises(ConfigError, match="site"):
        archive_kwollect_day(client, "..", "m", ["nova-1"], T0.date(), archive)
    with pytest.raises(ConfigError, match="metric"):
        KwollectArchiveConfig(metrics=("a/b",), clusters=(("lyon", "nova"),))
    with pytest.raises(ConfigError, match="cluster"):
        KwollectArchiveConfig(clusters=(("lyon", ".."),))
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").rglob("*"))


@pytest.mark.slow  # 4 s measured on the shared 2-core machine (fast tier: < 3 s)
def test_a_metric_name_from_the_api_that_would_escape_is_a_source_error(tmp_path):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/metrics"):
            return httpx.Response(
                200,
                json=[
                    {
                        "timestamp": T0.isoformat(),
                        "device_id": "nova-1",
                        "metric_id": "../../evil",
                        "value": 1,
                        "labels": {},
                    }
                ],
            )
        return httpx.Response(404, json={"message": "not found"})

    k = Kwollect(
        ["nova-1.lyon"], api_url="http://kwollect.test", transport=httpx.MockTransport(handler)
    )
    k.start(T0).stop(T0 + dt.timedelta(seconds=1))
    k.deployed = True  # this API answers metrics only: its nodes are taken as checked
    with pytest.raises(SourceError, match="metric name sent by the API"):
        k.backup(tmp_path / "b")
    assert not (tmp_path / "evil").exists() and not list(tmp_path.rglob("*evil*"))
