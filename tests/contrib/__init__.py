"""Tests of conveyor.contrib: the SQLAlchemy and Django enqueue-on-commit helpers."""
