"""The errors of the SCXML reader and its expression evaluator."""

from __future__ import annotations

from ...errors import StatechartError


class ScxmlError(StatechartError):
    """A document that cannot be loaded: malformed XML, an unknown element or attribute, a
    bad reference. The message names the source and line."""


class ScxmlWarning(UserWarning):
    """A document that loads, but with a problem the reader worked around (e.g. an invoked
    document's transition to a state it does not have). The message names the source and
    line."""


class ExpressionError(Exception):
    """An expression failed while the machine ran; SCXML turns it into ``error.execution``."""


class ExpressionRefused(ExpressionError):
    """An expression uses something the restricted evaluator does not allow (imports, dunder
    names, unlisted functions or attributes, ...)."""
