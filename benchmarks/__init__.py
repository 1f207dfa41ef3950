"""dxt-archive benchmarks: ``python -m benchmarks`` (or ``./run bench``)."""
