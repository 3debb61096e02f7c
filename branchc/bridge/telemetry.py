"""`branchc serve --otel`: an OpenTelemetry SDK set up from the standard `OTEL_*` variables, so the spans of the
`mcp` SDK's middleware and branchc's own (runtime/tracing.py) are exported.

- `OTEL_TRACES_EXPORTER`: a comma-separated list of `otlp` (the default, as OpenTelemetry's; it needs
  `opentelemetry-exporter-otlp`, configured by the `OTEL_EXPORTER_OTLP_*` variables), `console` (each span as
  JSON on stderr: stdio serving keeps stdout for the protocol) and `none`;
- `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name the service (default `branchc`);
- `OTEL_TRACES_SAMPLER` and its argument, as the SDK reads them.

Needs the `otel` extra (`pip install 'branchc[otel]'`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..errors import BranchcError
from ..extras import missing_extra
from ..runtime import tracing

__all__ = ["TelemetryError", "configure_tracing"]


class TelemetryError(BranchcError, ValueError):
    """OTEL_* settings branchc cannot act on; the message names the variable and the fix."""


def configure_tracing(*, content: bool = False) -> Any:
    """Install a tracer provider exporting as the `OTEL_*` variables say; it. `content`: spans may hold what users
    and models wrote (`--trace-content`)."""
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as error:
        raise missing_extra("otel", error) from None
    names = [name.strip() for name in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if name.strip()]
    exporters = []
    for name in names:
        if name == "console":
            exporters.append(ConsoleSpanExporter(out=sys.stderr))
        elif name == "otlp":
            exporters.append(_otlp())
        elif name != "none":
            raise TelemetryError(
                f"OTEL_TRACES_EXPORTER: {name!r} is not an exporter branchc sets up; give otlp, console or none"
            )
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "branchc"}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracing.CONTENT = content
    return provider


def _otlp() -> Any:
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise TelemetryError(
            "OTEL_TRACES_EXPORTER=otlp (the default) needs the OTLP exporter: pip install opentelemetry-exporter-otlp, "
            "or set OTEL_TRACES_EXPORTER=console"
        ) from None
    return OTLPSpanExporter()
