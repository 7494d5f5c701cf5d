"""An importable app for ``--app tests.cli.sample_app:app`` (storage from ``CONVEYOR_URL``)."""

from tests.web.seed import make_app

app = make_app(None)
