"""`statecharts worker --otlp`: export traces and metrics over OTLP/HTTP.

Sets OpenTelemetry's global tracer and meter providers with the SDK's batch span processor and
periodic metric reader, each with the OTLP/HTTP exporter. Everything else comes from the
standard variables the SDK reads: `OTEL_EXPORTER_OTLP_ENDPOINT` (default
`http://localhost:4318`), `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_METRIC_EXPORT_INTERVAL`, ...
An application that configures OpenTelemetry itself (or runs under `opentelemetry-instrument`)
does not need this: the worker uses whatever global providers are set.
"""

from __future__ import annotations

import os
from collections.abc import Callable

SERVICE_NAME = "statecharts-worker"

INSTALL = (
    "--otlp needs OpenTelemetry's SDK and OTLP exporter: "
    "pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http"
)


def configure() -> Callable[[], None]:
    """Install global providers exporting over OTLP/HTTP; returns the function that flushes
    and shuts them down (call it when the worker stops)."""
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise SystemExit(f"{INSTALL} ({exc})") from exc
    resource = Resource.create(
        {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": SERVICE_NAME}
    )
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    meter_provider = MeterProvider(
        resource=resource, metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())]
    )
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)

    def shutdown() -> None:
        tracer_provider.shutdown()
        meter_provider.shutdown()

    return shutdown
