"""Triton's ``--trace-config mode=opentelemetry``: each traced request's spans, exported over OTLP/HTTP.

As Triton 2.51 makes them: a root span ``InferRequest`` (the client's W3C ``traceparent`` its parent, when
the request carries one), a child span named after the model from ``REQUEST_START`` to ``REQUEST_END``
(attributes ``triton.model_name``, ``triton.model_version``, ``triton.trace_id``,
``triton.trace_parent_id``, ``triton.request_id``) and its child ``compute`` from ``COMPUTE_START`` to
``COMPUTE_END``; every activity is an event of the span open at its time. Spans are made when the
request has been answered, from its recorded times (monotonic nanoseconds, mapped to the wall clock).

The exporter is the OpenTelemetry SDK's OTLP/HTTP one to ``url`` (Triton's default
``http://localhost:4318/v1/traces``), with the ``resource`` attributes (``service.name`` is
``triton-inference-server``) and the ``bsp_*`` batch settings of the command line. Needs the packages
``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http``; without them the server refuses to
start in this mode. A caller may hand its own tracer provider (tests, embedders) instead.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sonic.server.trace.config import TraceConfig

DEFAULT_URL = "http://localhost:4318/v1/traces"
TRACER_NAME = "triton-server"  # Triton's kTritonTracer
MISSING = (
    "--trace-config mode=opentelemetry needs OpenTelemetry's SDK and OTLP/HTTP exporter: "
    "pip install 'sonic-inference[otlp]' (opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)"
)


def _provider(config: TraceConfig) -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
            OTLPSpanExporter,
        )
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415
    except ImportError:
        raise ImportError(MISSING) from None
    attributes = {"service.name": "triton-inference-server"}
    for key, value in config.options:
        if key == "resource":
            name, _, setting = value.partition("=")
            attributes[name] = setting
    processor = BatchSpanProcessor(
        OTLPSpanExporter(endpoint=config.option("url", DEFAULT_URL)),
        max_queue_size=int(config.option("bsp_max_queue_size", "2048")),
        schedule_delay_millis=int(config.option("bsp_schedule_delay", "5000")),
        max_export_batch_size=int(config.option("bsp_max_export_batch_size", "512")),
    )
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(processor)
    return provider


class OtelTraceContext:
    """The tracer of a server in OpenTelemetry mode, and the W3C propagator that reads ``traceparent``."""

    def __init__(self, config: TraceConfig, tracer_provider: Any = None) -> None:
        from opentelemetry import trace  # noqa: PLC0415  (optional extra)
        from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
            TraceContextTextMapPropagator,
        )

        self._owned = tracer_provider is None  # built here: shut down (its spans flushed) here
        self._provider = _provider(config) if tracer_provider is None else tracer_provider
        self.tracer = trace.get_tracer(TRACER_NAME, tracer_provider=self._provider)
        self._propagator = TraceContextTextMapPropagator()
        self._trace = trace
        # Monotonic nanoseconds (the requests' clock) to the wall clock's, once.
        self.offset_ns = time.time_ns() - time.perf_counter_ns()

    def export(self, headers: Mapping[str, str] | None) -> OtelExport:
        parent = self._propagator.extract(dict(headers)) if headers else None
        sampled = False
        if parent is not None:
            context = self._trace.get_current_span(parent).get_span_context()
            sampled = context.is_valid
        return OtelExport(self, parent, sampled)

    def close(self) -> None:
        if self._owned:
            self._provider.shutdown()


@dataclass(frozen=True, slots=True)
class TracedModel:
    """What the model's span says of the request."""

    trace_id: int
    name: str
    version: int
    request_id: str


class OtelExport:
    """One traced request's span maker: its parent context and whether that makes it traced regardless."""

    __slots__ = ("_context", "parent", "parent_sampled")

    def __init__(self, context: OtelTraceContext, parent: Any, parent_sampled: bool) -> None:
        self._context = context
        self.parent = parent
        self.parent_sampled = parent_sampled  # a valid client span context: traced, as Triton forces it

    def spans(self, trace: TracedModel, stamps: list[tuple[str, int]]) -> None:
        from opentelemetry import trace as otel  # noqa: PLC0415

        tracer, offset = self._context.tracer, self._context.offset_ns
        server = otel.SpanKind.SERVER
        first = min((ns for _, ns in stamps), default=time.perf_counter_ns())
        root = tracer.start_span("InferRequest", context=self.parent, kind=server, start_time=first + offset)
        times = dict(stamps)
        open_spans = [root]
        model = compute = None
        for name, ns in stamps:
            if name == "REQUEST_START":
                model = tracer.start_span(
                    trace.name,
                    context=otel.set_span_in_context(root),
                    kind=server,
                    start_time=ns + offset,
                    attributes={
                        "triton.model_name": trace.name,
                        "triton.model_version": trace.version,
                        "triton.trace_id": trace.trace_id,
                        "triton.trace_parent_id": 0,
                        **({"triton.request_id": trace.request_id} if trace.request_id else {}),
                    },
                )
                open_spans.append(model)
            elif name == "COMPUTE_START" and model is not None:
                compute = tracer.start_span(
                    "compute", context=otel.set_span_in_context(model), kind=server, start_time=ns + offset
                )
                open_spans.append(compute)
            open_spans[-1].add_event(name, timestamp=ns + offset)
            if (name == "COMPUTE_END" and compute is not None) or (
                name == "REQUEST_END" and model is not None
            ):
                open_spans.pop().end(end_time=ns + offset)
        while len(open_spans) > 1:  # a request that failed half-way: its spans end with its last activity
            open_spans.pop().end(end_time=max(times.values(), default=first) + offset)
        root.end(end_time=time.perf_counter_ns() + offset)
