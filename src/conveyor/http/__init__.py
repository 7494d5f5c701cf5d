"""What conveyor's HTTP endpoints share: ``asgi`` (the guard every request passes first and
``mount_at``), ``server`` (uvicorn on a thread, with limits) and ``metrics`` (Prometheus)."""
