"""The PostgreSQL backend: ``open_postgres("postgresql://user:pass@host/db?schema=conveyor")``."""
