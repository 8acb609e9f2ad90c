"""The diff tests share the diagram tests' ``dot_installed`` fixture (a loud skip without
Graphviz, a failure under CI=true)."""

from tests.render.conftest import dot_installed

__all__ = ["dot_installed"]
