"""Importable apps the fault suite's worker subprocesses load."""
