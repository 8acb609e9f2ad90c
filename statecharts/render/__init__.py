"""Diagrams of machines that non-engineers can read: Graphviz (DOT, SVG, PNG) and Mermaid.

>>> from statecharts.render import to_svg, to_mermaid
>>> svg_text = to_svg(machine)                 # needs Graphviz's `dot` program
>>> svg_text = to_svg(machine, snapshot)       # with the snapshot's active states highlighted
>>> markdown_source = to_mermaid(machine)      # no external program needed

The same machine always gives byte-identical DOT, Mermaid and SVG (with the same Graphviz).
"""

from __future__ import annotations

from dataclasses import replace

from ..machine import Machine
from ..snapshot import Snapshot
from . import graphviz
from .graphviz import GraphvizNotFound
from .mermaid import mermaid_source
from .model import build_diagram

__all__ = ["GraphvizNotFound", "to_dot", "to_mermaid", "to_png", "to_svg"]


def to_dot(machine: Machine, snapshot: Snapshot | None = None, *, columns: bool = True) -> str:
    """The Graphviz DOT text of ``machine`` (``snapshot``'s active states highlighted); a
    deep chart wraps into columns side by side unless ``columns`` is False (one strip: the
    simpler layout to try when Graphviz cannot lay the columns out)."""
    diagram = build_diagram(machine, snapshot)
    return graphviz.dot_source(diagram if columns else replace(diagram, columns={}))


def to_mermaid(machine: Machine, snapshot: Snapshot | None = None) -> str:
    """The Mermaid ``stateDiagram-v2`` text of ``machine``."""
    return mermaid_source(build_diagram(machine, snapshot))


def to_svg(machine: Machine, snapshot: Snapshot | None = None) -> str:
    """The SVG of ``machine``, laid out by Graphviz; raises GraphvizNotFound without ``dot``."""
    return graphviz.svg(to_dot(machine, snapshot))


def to_png(machine: Machine, snapshot: Snapshot | None = None) -> bytes:
    """The PNG of ``machine``, laid out by Graphviz; raises GraphvizNotFound without ``dot``."""
    return graphviz.png(to_dot(machine, snapshot))
