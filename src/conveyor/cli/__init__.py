"""The ``conveyor`` command line."""
