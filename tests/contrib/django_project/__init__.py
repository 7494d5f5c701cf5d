"""A small Django project whose tasks run on conveyor (``tests/contrib/test_django_tasks.py``)."""
