"""Test kit for statecharts: Hypothesis strategies (``strategies``), a rule-based harness with
per-state invariants (``harness``), graph tools and coverage (``graph``, ``coverage``),
ready-made properties (``properties``), invoked work in the alphabet (``outcomes``), a pytest
plugin (``plugin``) and an importer for python-statemachine classes (``interop``). See
docs/testing.md. The durable model-based check drives the durable runtime, so it lives beside
it: ``persistence.testing``.

Only ``graph``, ``coverage`` and ``outcomes`` work without Hypothesis; the other modules need
the ``testing`` extra (``pip install statecharts[testing]``). The engine never imports this
package, and this package imports nothing of ``persistence``.
"""

from .coverage import CoverageRecorder, CoverageReport
from .graph import (
    Path,
    explore,
    explored_coverage,
    paths_from_events,
    shortest_paths,
    simple_paths,
)
from .outcomes import ExplorationCutOff, ExplorationWarning

__all__ = [
    "CoverageRecorder",
    "CoverageReport",
    "ExplorationCutOff",
    "ExplorationWarning",
    "Path",
    "explore",
    "explored_coverage",
    "paths_from_events",
    "shortest_paths",
    "simple_paths",
]
