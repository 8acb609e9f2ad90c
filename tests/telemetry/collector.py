"""A loopback OTLP/HTTP collector for tests: receives what worker subprocesses export.

`Collector()` serves `POST /v1/traces` and `POST /v1/metrics` on 127.0.0.1 (a free port) from a
daemon thread, decodes the protobuf requests with `opentelemetry-proto` and keeps the spans;
use it as a context manager so the server is always shut down.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class Span:
    """One received span, ids as lower-case hex."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]
    status: int  # 0 unset, 1 ok, 2 error
    resource: dict[str, Any]
    start_ns: int
    end_ns: int


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attrs(items: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in items}


class Collector:
    """The server; `spans` grows as requests arrive (read it under `lock` or via `snapshot`)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.metric_requests = 0
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path == "/v1/traces":
                    owner._traces(body)
                    reply = ExportTraceServiceResponse().SerializeToString()
                else:
                    with owner.lock:
                        owner.metric_requests += 1
                    reply = b""
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The value for OTEL_EXPORTER_OTLP_ENDPOINT."""
        return f"http://127.0.0.1:{self.server.server_port}"

    def _traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = _attrs(resource_spans.resource.attributes)
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    found.append(
                        Span(
                            s.name,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex() or None,
                            _attrs(s.attributes),
                            tuple((link.trace_id.hex(), link.span_id.hex()) for link in s.links),
                            s.status.code,
                            resource,
                            s.start_time_unix_nano,
                            s.end_time_unix_nano,
                        )
                    )
        with self.lock:
            self.spans.extend(found)

    def snapshot(self) -> list[Span]:
        """The spans received so far."""
        with self.lock:
            return list(self.spans)

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
