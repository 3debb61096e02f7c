"""`branchc serve --otel` and `--metrics`: the OpenTelemetry SDK set up, so the spans of the `mcp` SDK's middleware
and branchc's own spans and metrics (runtime/tracing.py) are exported.

Traces (`--otel`), from the standard `OTEL_*` variables:

- `OTEL_TRACES_EXPORTER`: a comma-separated list of `otlp` (the default, as OpenTelemetry's; it needs
  `opentelemetry-exporter-otlp`, configured by the `OTEL_EXPORTER_OTLP_*` variables), `console` (each span as
  JSON on stderr: stdio serving keeps stdout for the protocol) and `none`;
- `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name the service (default `branchc`);
- `OTEL_TRACES_SAMPLER` and its argument, as the SDK reads them.

Metrics (`--metrics`): a meter provider whose reader is opentelemetry-exporter-prometheus's, on a registry of
this server's own, which `/metrics` renders in Prometheus's text format at each scrape (bridge/operations.py).
OTel names become Prometheus's the exporter's way: `branchc.round.duration` (unit s) is
`branchc_round_duration_seconds`, the counter `branchc.rounds` is `branchc_rounds_total`.

Needs the `otel` extra (`pip install 'branchc[otel]'`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..errors import BranchcError
from ..extras import missing_extra
from ..runtime import tracing

__all__ = ["Metrics", "TelemetryError", "configure_metrics", "configure_tracing"]


class TelemetryError(BranchcError, ValueError):
    """OTEL_* settings branchc cannot act on; the message names the variable and the fix."""


def configure_tracing(*, content: bool = False, principal: bool = False) -> Any:
    """Install a tracer provider exporting as the `OTEL_*` variables say; it. `content`: spans may hold what users
    and models wrote (`--trace-content`); `principal`: a failed span names the caller (`--trace-principal`)."""
    try:
        from opentelemetry import trace
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
    provider = TracerProvider(resource=_resource())
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracing.CONTENT = content
    tracing.PRINCIPAL = principal
    return provider


def _resource() -> Any:
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "branchc"}))
    return resource


#: what `--metrics` needs of the otel extra: the Prometheus exporter (it brings the SDK and prometheus-client)
METRICS_PART = ("exporting metrics", "opentelemetry-exporter-prometheus", "opentelemetry.exporter.prometheus")


class Metrics:
    """The meter provider `--metrics` installs, and the Prometheus registry its reader fills at each scrape."""

    def __init__(self, provider: Any, registry: Any) -> None:
        self.provider = provider
        self.registry = registry

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """The metrics now, in the Prometheus text format (or OpenMetrics when `accept` asks for it): (body, content
        type). Reading them reads the store (runs waiting): call it off the event loop."""
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def shutdown(self) -> None:
        self.provider.shutdown()


def configure_metrics() -> Metrics:
    """Install a meter provider read by a Prometheus reader on a registry of its own (so /metrics shows branchc's
    and the SDK's metrics, not every collector of the process)."""
    try:
        from opentelemetry import metrics
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from prometheus_client import CollectorRegistry
    except ImportError as error:
        raise missing_extra("otel", error, part=METRICS_PART) from None
    registry = CollectorRegistry(auto_describe=True)
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)], resource=_resource())
    metrics.set_meter_provider(provider)
    tracing.measuring()
    return Metrics(provider, registry)


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
