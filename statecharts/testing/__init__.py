"""Test kit for statecharts: Hypothesis strategies (``strategies``), a rule-based harness with
per-state invariants (``harness``), graph tools and coverage (``graph``, ``coverage``),
ready-made properties (``properties``), a pytest plugin (``plugin``) and an importer for
python-statemachine classes (``interop``). See docs/testing.md.

Only ``graph`` and ``coverage`` work without Hypothesis; the other modules need the
``testing`` extra (``pip install statecharts[testing]``). The engine never imports this package.
"""

from .coverage import CoverageRecorder, CoverageReport
from .graph import Path, explore, paths_from_events, shortest_paths, simple_paths

__all__ = ["CoverageRecorder", "CoverageReport", "Path", "explore", "paths_from_events",
           "shortest_paths", "simple_paths"]
