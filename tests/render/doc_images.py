"""The pictures in docs/diagrams.md, drawn from the test examples.

Regenerate after a renderer change (needs Graphviz), then review and commit docs/img/:

    .venv/bin/python -m tests.render.doc_images

``test_doc_images.py`` fails when a committed picture no longer matches its DOT.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from statecharts import Machine, Snapshot

from .examples import constructs, invoice, parallel_root

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "img"


def _waiting_to_retry() -> tuple[Machine, Snapshot | None]:
    """The invoice run after its first attempt to create the invoice failed."""
    machine = invoice()
    snapshot, _ = machine.initial_transition()
    snapshot, _ = machine.transition(snapshot, "PAYMENT_RECEIVED")
    snapshot, _ = machine.transition(
        snapshot, {"type": "xstate.error.actor.create", "error": {"name": "Timeout"}}
    )
    return machine, snapshot


PICTURES: dict[str, Callable[[], tuple[Machine, Snapshot | None]]] = {
    "invoice.svg": lambda: (invoice(), None),
    "invoice-waiting-to-retry.svg": _waiting_to_retry,
    "order-fulfilment.svg": lambda: (constructs(), None),
    "light-and-fan.svg": lambda: (parallel_root(), None),
}


def main() -> None:
    """Write every picture into docs/img/."""
    from statecharts.render import to_svg

    IMAGES.mkdir(parents=True, exist_ok=True)
    for name, build in PICTURES.items():
        machine, snapshot = build()
        (IMAGES / name).write_text(to_svg(machine, snapshot), encoding="utf-8")
        print(f"wrote docs/img/{name}")


if __name__ == "__main__":
    main()
