"""Durable runs for statecharts: stores (SQLite, PostgreSQL, memory), a runtime and workers."""

from persistence.stores import open_store

__all__ = ["open_store"]
