"""Sources: one module per backend. Each turns (what, window) into a record stream."""
