"""The worker: fetches jobs from storage, runs them, and acknowledges the outcome.

``Launcher`` runs one worker process (heartbeat, recoverer, poller, janitor, processors);
``Supervisor`` forks several of them. Users start both with ``conveyor worker``.
"""
