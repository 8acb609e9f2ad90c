"""docs/img/order-change.svg is what the diff draws today (by its stamped DOT hash)."""

from __future__ import annotations

from statecharts.diff.picture import diff_dot
from statecharts.render.diagrams import svg_source_hash
from statecharts.render.graphviz import source_hash
from tests.diff.doc_image import PICTURE, reviewed


def test_the_docs_picture_of_a_change_is_current() -> None:
    assert PICTURE.is_file(), "docs/img/order-change.svg is missing: python -m tests.diff.doc_image"
    assert svg_source_hash(PICTURE.read_text(encoding="utf-8")) == source_hash(
        diff_dot(reviewed())
    ), "docs/img/order-change.svg is stale: python -m tests.diff.doc_image, review, commit"
