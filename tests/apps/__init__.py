"""Importable task modules for tests that run worker processes."""
