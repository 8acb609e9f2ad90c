"""SCXML documents: ``load_scxml`` (a document -> a machine), ``to_scxml`` (a machine with
named guards and actions -> a document) and the W3C conformance runner
(``python -m statecharts.io.scxml.conformance``). See docs/scxml.md."""

from .errors import ExpressionError, ExpressionRefused, ScxmlError, ScxmlWarning
from .export import to_scxml
from .loader import load_scxml

__all__ = [
    "ExpressionError",
    "ExpressionRefused",
    "ScxmlError",
    "ScxmlWarning",
    "load_scxml",
    "to_scxml",
]
