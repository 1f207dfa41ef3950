"""The collectd_es backend."""
