"""The embedded SQLite backend (the default storage): ``open_sqlite(url, clock)``."""
