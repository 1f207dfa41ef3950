"""The examon backend."""
