"""The pictures in docs/img/ are current: each SVG's stamped DOT hash matches what the
renderer draws today (regenerate with ``python -m tests.render.doc_images``)."""

from __future__ import annotations

import pytest

from statecharts.render import to_dot
from statecharts.render.diagrams import svg_source_hash
from statecharts.render.graphviz import source_hash

from .doc_images import IMAGES, PICTURES


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_doc_picture_is_current(name: str) -> None:
    path = IMAGES / name
    assert path.is_file(), f"docs/img/{name} is missing: python -m tests.render.doc_images"
    machine, snapshot = PICTURES[name]()
    assert svg_source_hash(path.read_text(encoding="utf-8")) == source_hash(
        to_dot(machine, snapshot)
    ), f"docs/img/{name} is stale: python -m tests.render.doc_images, then review and commit"
