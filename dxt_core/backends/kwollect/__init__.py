"""The kwollect backend."""
