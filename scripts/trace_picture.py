"""Draw a trace of the demo's invoice workflow as a timeline: ``docs/img/trace-invoice.svg``.

Run from the repository root: ``python -m scripts.trace_picture [OUT.svg]``. The invoice
workflow (with the demo's fakes, the invoice API failing three times so the call is retried
after durable waits of 1, 2 and 4 s) is started inside a webhook-like request span and driven
by a real ``Worker`` on a SQLite file, on the wall clock; the SDK's in-memory exporter collects
the spans, which are drawn one row each, nested by parent, on a common time axis.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from html import escape
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "docs" / "img" / "trace-invoice.svg"


def collect() -> list[Any]:
    """Run one invoice durably with tracing; its finished spans."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from machines.fakes import FakeWorld
    from machines.invoice import build, fake_services
    from machines.invoice.adapters import FakeLedger
    from persistence import open_store
    from persistence.runtime import Runtime
    from persistence.telemetry import Telemetry
    from persistence.worker import Worker

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with tempfile.TemporaryDirectory(prefix="statecharts-trace-") as tmp:
        world = FakeWorld(str(Path(tmp) / "world.db"))
        FakeLedger(world).put_customer("C-2", "Grace", "grace@example.com")
        world.fail("invoice_api", times=3)
        store = open_store(f"sqlite:///{Path(tmp) / 'runs.db'}", migrate=True)
        runtime = Runtime(
            store, [build(fake_services(world))], telemetry=Telemetry(tracer_provider=provider)
        )
        worker = Worker(runtime, poll_ms=20)
        thread = threading.Thread(target=worker.run, name="worker")
        thread.start()
        try:
            tracer = provider.get_tracer("demo")
            with tracer.start_as_current_span("POST /orders/O-2", kind=trace.SpanKind.SERVER):
                run_id = runtime.start(
                    "invoice",
                    {"order_id": "O-2", "customer_id": "C-2", "amount_cents": 4_990_00},
                    key="invoice:O-2",
                )
            deadline = time.monotonic() + 60
            while runtime.get(run_id).status == "active" or store.list_effects(run_id, "pending"):
                if time.monotonic() > deadline:
                    raise RuntimeError("the invoice run did not finish within 60 s")
                time.sleep(0.05)
        finally:
            worker.stop()
            thread.join(timeout=30)
            store.close()
    return list(exporter.get_finished_spans())


def _label(span: Any) -> str:
    a = span.attributes or {}
    if span.name.startswith("step "):

        def short(state: Any) -> str:
            return ".".join(str(state).split(".")[-2:]).replace("creating_invoice.", "")

        text = (
            f"{short(a.get('statecharts.state.before'))} → "
            f"{short(a.get('statecharts.state.after'))}"
        )
        events = [
            str(e).split(":")[0].replace("xstate.", "") for e in a.get("statecharts.events") or ()
        ]
        return text + (f"  ({', '.join(events)})" if events else "")
    if "statecharts.effect.outcome" in a:
        attempt = a.get("statecharts.effect.attempt")
        return str(a["statecharts.effect.outcome"]) + (f", attempt {attempt}" if attempt else "")
    if "statecharts.run.id" in a:
        return f"run {str(a['statecharts.run.id'])[:8]}"
    return ""


def _ordered(spans: list[Any]) -> list[tuple[Any, int]]:
    """Depth-first by start time: (span, depth)."""
    children: dict[int | None, list[Any]] = {}
    ids = {s.context.span_id for s in spans}
    for s in spans:
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in ids else None
        children.setdefault(parent, []).append(s)
    out: list[tuple[Any, int]] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda x: x.start_time):
            out.append((s, depth))
            walk(s.context.span_id, depth + 1)

    walk(None, 0)
    return out


def svg(spans: list[Any]) -> str:
    """The timeline: one row per span, bar from start to end, failed spans red."""
    rows = _ordered(spans)
    t0 = min(s.start_time for s in spans)
    t1 = max(s.end_time for s in spans)
    left, width, row_h, top = 250, 820, 22, 46
    scale = width / max(t1 - t0, 1)
    height = top + row_h * len(rows) + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 30}" height="{height}" '
        f'font-family="DejaVu Sans, Arial, sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="20" font-size="14" font-weight="bold">One trace: the invoice workflow '
        f"on the durable runtime ({(t1 - t0) / 1e9:.1f} s)</text>",
        '<text x="10" y="36" fill="#555">request span → start → steps (children of the stored '
        "start span) → effects; the invoice API fails 3 times, retried after durable waits</text>",
    ]
    for tick in range(0, int((t1 - t0) / 1e9) + 1):
        x = left + tick * 1e9 * scale
        parts.append(
            f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 30}" stroke="#eee"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{height - 16}" fill="#777" text-anchor="middle">{tick}s</text>'
        )
    for i, (span, depth) in enumerate(rows):
        y = top + i * row_h
        failed = span.status.status_code.name == "ERROR"
        if span.name.startswith("step "):
            colour = "#4c78a8"
        elif span.name.startswith(("start ", "POST ")):
            colour = "#72b7b2"
        else:
            colour = "#f58518"
        if failed:
            colour = "#e45756"
        x = left + (span.start_time - t0) * scale
        w = max((span.end_time - span.start_time) * scale, 2)
        name = escape(span.name)
        parts.append(f'<text x="{10 + depth * 14}" y="{y + 14}">{name}</text>')
        parts.append(
            f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row_h - 8}" '
            f'rx="2" fill="{colour}"/>'
        )
        label = escape(_label(span))
        if label and x > left + width * 0.5:  # late spans: the label on the bar's left
            parts.append(
                f'<text x="{x - 4:.1f}" y="{y + 14}" text-anchor="end" fill="#333" '
                f'font-size="11">{label}</text>'
            )
        elif label:
            parts.append(
                f'<text x="{x + w + 4:.1f}" y="{y + 14}" fill="#333" font-size="11">{label}</text>'
            )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Write the picture (default docs/img/trace-invoice.svg)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else OUT
    out.write_text(svg(collect()))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
