"""Writers turn a record stream into one file's bytes. One module per format."""

from dxt_core.writers.base import SeriesWriter, WriteResult
from dxt_core.writers.compress import GzipStream
from dxt_core.writers.csv_gzip import GzipCsvTableWriter, GzipCsvWriter, TimestampFormatter

__all__ = [
    "GzipCsvTableWriter",
    "GzipCsvWriter",
    "GzipStream",
    "SeriesWriter",
    "TimestampFormatter",
    "WriteResult",
]
