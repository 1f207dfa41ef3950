"""Fixtures of the collectd_es integration tests: version stand-ins in front of noida-db
(``noida_es`` itself comes from tests/conftest.py)."""

from tests.noida_fixtures import _standins, es_standin  # noqa: F401
