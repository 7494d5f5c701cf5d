"""Settings of the test project: its database and conveyor's storage come from the
environment (``DJANGO_TEST_DB``, ``CONVEYOR_URL``), as a real deployment's would."""

import os

SECRET_KEY = "not-a-secret-test-project"
USE_TZ = True
INSTALLED_APPS = ["django_tasks"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": os.environ["DJANGO_TEST_DB"]}}
TASKS = {
    "default": {
        "BACKEND": "conveyor.contrib.django_tasks.ConveyorBackend",
        "QUEUES": ["default", "mail", "idle"],  # no worker serves "idle"
        "OPTIONS": {"URL": os.environ["CONVEYOR_URL"]},
    },
}
if os.environ.get("CONVEYOR_OTHER_URL"):  # a second backend on a store of its own
    TASKS["other"] = {
        "BACKEND": "conveyor.contrib.django_tasks.ConveyorBackend",
        "QUEUES": ["default", "idle"],
        "OPTIONS": {"URL": os.environ["CONVEYOR_OTHER_URL"]},
    }
