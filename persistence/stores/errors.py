"""The errors every store raises, `StoreError` and its kinds (what went wrong, and whether the
caller may try again)."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error raised by a store."""


class ConflictError(StoreError):
    """A write lost a race: the run's version or lease owner is not what the writer expected.

    The writer's view is stale; nothing was written. Reload the run and decide again.
    """


class RunNotFoundError(StoreError, LookupError):
    """No run has the given id."""


class RunFinishedError(StoreError):
    """The run is terminal and cannot accept the requested change (for example a new event)."""


class SchemaVersionError(StoreError):
    """The database schema is older or newer than the code expects."""


class StoreUnavailableError(StoreError):
    """The database cannot be reached right now (connection lost, server down, file locked).

    Workers treat this as transient: back off, reconnect, try again. Nothing was committed by the
    call that raised it unless the store says otherwise.
    """


class StoreEncodingError(StoreError):
    """A value the database cannot hold (an integer too large, a NUL in a string, invalid
    Unicode): a fault of the data, never an outage. The run it belongs to is failed."""


class StoreURLError(StoreError, ValueError):
    """A store URL that `open_store` cannot understand."""
