"""Integrations with other libraries, each importable only where that library is installed.

* ``conveyor.contrib.sqlalchemy``: enqueue when a SQLAlchemy session's transaction commits.
* ``conveyor.contrib.django``: enqueue when a Django ``atomic`` block commits.

conveyor itself never imports these modules, so it does not depend on either library.
"""
