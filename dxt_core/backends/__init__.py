"""Backends: one package per source, each with the same file roles."""
