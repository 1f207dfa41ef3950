"""The dataset's licence: an SPDX identifier and its text's URL, never another licence's URL.

``--licence CC0-1.0`` alone used to go out with CC BY 4.0's URL (the default of
``--licence-url``) in datapackage.json, croissant.json and the README."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from dxt_core.archive import Archive, DayKey
from dxt_core.backends import get_publisher
from dxt_core.errors import ConfigError
from dxt_core.publish.dataset import PublishOptions, publish
from dxt_core.publish.licences import KNOWN


def options(tmp_path, **given):
    return PublishOptions(
        archive=tmp_path / "a", out=tmp_path / "o", from_month="2020-03", to_month="2020-03",
        **given,
    )  # fmt: skip


def test_a_known_licence_gets_its_own_url_and_spelling(tmp_path):
    assert (options(tmp_path).licence, options(tmp_path).licence_url) == (
        "CC-BY-4.0",
        "https://creativecommons.org/licenses/by/4.0/",
    )
    o = options(tmp_path, licence="cc0-1.0")
    assert (o.licence, o.licence_url) == ("CC0-1.0", KNOWN["CC0-1.0"])
    o = options(tmp_path, licence="ODbL-1.0")
    assert o.licence_url == "https://opendatacommons.org/licenses/odbl/1-0/"


def test_a_given_url_is_kept(tmp_path):
    o = options(tmp_path, licence="LicenseRef-Cineca-1", licence_url=" https://example.org/l ")
    assert (o.licence, o.licence_url) == ("LicenseRef-Cineca-1", "https://example.org/l")


@pytest.mark.parametrize(
    ("licence", "message"),
    [
        ("CC-BY-40", r"--licence 'CC-BY-40': give the URL .* \(did you mean CC-BY-4.0"),
        (
            "LicenseRef-Mine",
            r"--licence 'LicenseRef-Mine': give the URL of its text with --licence-url",
        ),
        ("free for research use", r"not an SPDX licence identifier"),
        ("CC BY 4.0 / see website", r"not an SPDX licence identifier"),
        (" ", r"not an SPDX licence identifier"),
        (")MIT(", r"not an SPDX licence identifier"),
        ("MIT ()", r"not an SPDX licence identifier"),
        ("MIT OR", r"not an SPDX licence identifier"),
        # an expression: its URL is needed, and no "did you mean" one of its licences
        ("CC-BY-4.0 OR MIT", r"'CC-BY-4.0 OR MIT': give the URL of its text with --licence-url; "),
    ],
)
def test_an_unknown_licence_without_url_or_free_text_is_refused(tmp_path, licence, message):
    with pytest.raises(ConfigError, match=message):
        options(tmp_path, licence=licence)


def test_the_dataset_carries_the_licence_url_of_its_licence(tmp_path):
    key = DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 9))
    with Archive(tmp_path / "a").begin(key) as day:  # a month to publish: one empty day
        day.commit({"status": "empty", "time_zone": "Europe/Rome"})
    publish(get_publisher("examon").publish_role(), options(tmp_path, licence="CC0-1.0",
                                                            keep_identities=True))  # fmt: skip
    out = tmp_path / "o"
    package = json.loads((out / "datapackage.json").read_text())
    assert package["licenses"] == [{"name": "CC0-1.0", "path": KNOWN["CC0-1.0"]}]
    assert json.loads((out / "croissant.json").read_text())["license"] == KNOWN["CC0-1.0"]
    readme = (out / "README.md").read_text()
    assert f"CC0-1.0 ({KNOWN['CC0-1.0']})" in readme
    assert "creativecommons.org/licenses/by/" not in json.dumps(package) + readme


def test_expressions_and_document_references_with_their_url_are_kept(tmp_path):
    for licence in ("CC-BY-4.0 OR MIT", "(MIT AND Apache-2.0) WITH LLVM-exception",
                    "DocumentRef-site:LicenseRef-telemetry-1"):  # fmt: skip
        o = options(tmp_path, licence=licence, licence_url="https://example.org/l")
        assert (o.licence, o.licence_url) == (licence, "https://example.org/l")


@pytest.mark.parametrize("field", ["licence_url", "cite"])
def test_credentials_in_what_the_dataset_says_are_refused(tmp_path, field):
    """The dataset is public: a user:token URL in --licence-url or --cite (or the DAG's
    DXT_PUBLISH_LICENCE_URL / DXT_PUBLISH_CITE) would go into its README and metadata."""
    secret = "https://reader:t0ken@intranet.example/l"
    given = {"licence": "LicenseRef-x", "licence_url": "https://example.org/l", field: secret}
    with pytest.raises(ConfigError, match="a published dataset is public") as refused:
        options(tmp_path, **given)
    assert "t0ken" not in str(refused.value)


def test_a_month_whose_days_are_all_damaged_is_published_with_them_skipped(tmp_path):
    """Refusing months with nothing archived must not refuse one whose days are damaged: it
    is published, its days said skipped (they were called "no archived day")."""
    key = DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 9))
    with Archive(tmp_path / "a").begin(key) as day:
        with day.open("csv.gz") as fh:
            fh.write(b"not what the manifest says")
        day.commit({"status": "archived", "file": "2020-03-09.csv.gz", "rows": 1, "bytes": 99,
                    "sha256": "0" * 64, "time_zone": "Europe/Rome"})  # fmt: skip
    report = publish(get_publisher("examon").publish_role(),
                     options(tmp_path, keep_identities=True))  # fmt: skip
    assert [s.split(":")[0] for s in report.skipped] == ["skipped ipmi_pub/ambient 2020-03-09"]
    assert (tmp_path / "o" / "datapackage.json").is_file()


def test_a_publication_date_is_given_when_asked_and_checked(tmp_path):
    """Croissant recommends ``datePublished`` (mlcroissant's one warning on our datasets);
    without ``--date-published`` none is written, so the same inputs give the same bytes."""
    key = DayKey("examon", ("ipmi_pub", "ambient"), dt.date(2020, 3, 9))
    with Archive(tmp_path / "a").begin(key) as day:
        day.commit({"status": "empty", "time_zone": "Europe/Rome"})
    role = get_publisher("examon").publish_role()
    publish(role, options(tmp_path, keep_identities=True))
    out = tmp_path / "o"
    assert "datePublished" not in json.loads((out / "croissant.json").read_text())
    assert "Published:" not in (out / "README.md").read_text()
    again = publish(role, options(tmp_path, keep_identities=True, date_published="2026-12-07"))
    assert not again.unchanged  # another date: published again
    assert json.loads((out / "croissant.json").read_text())["datePublished"] == "2026-12-07"
    assert "- Published: 2026-12-07" in (out / "README.md").read_text()
    for bad in ("07/12/2026", "2026-12-7", "2026-13-01", "2026-12-07T10:00"):
        with pytest.raises(ConfigError, match=r"--date-published .* not a date YYYY-MM-DD"):
            options(tmp_path, date_published=bad)
