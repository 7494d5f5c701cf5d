"""The Redis backend (Redis, Valkey, Redis Cluster): Lua transitions, fenced leases."""
