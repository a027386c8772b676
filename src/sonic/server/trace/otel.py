"""Triton's ``--trace-config mode=opentelemetry``: each traced request's spans, exported over OTLP/HTTP.

As Triton 2.51 makes them: a root span ``InferRequest`` (the client's W3C ``traceparent`` its parent, when
the request carries one), a child span named after the model from ``REQUEST_START`` to ``REQUEST_END``
(attributes ``triton.model_name``, ``triton.model_version``, ``triton.trace_id``,
``triton.trace_parent_id``, ``triton.request_id`` when the request has one) with the events
``REQUEST_START``, ``QUEUE_START``, ``REQUEST_END``, and its child ``compute`` from ``COMPUTE_START`` to
``COMPUTE_END`` with the ``COMPUTE_*`` events; the front end's activities and ``INFER_RESPONSE_COMPLETE``
are the root's events. The requests a traced request makes (an ensemble's steps, BLS calls given its
trace) have their model spans under its model span (``triton.trace_parent_id`` its trace id). Spans are
made when the request has been answered, from its recorded times (monotonic nanoseconds, mapped to the
wall clock).

The exporter is the OpenTelemetry SDK's OTLP/HTTP one (``OTLPSpanExporter``, protobuf) to ``url``
(Triton's default ``http://localhost:4318/v1/traces``) under the SDK's batch span processor with the
``bsp_*`` settings, with the ``resource`` attributes (``service.name`` is ``triton-inference-server``
unless a ``resource`` names it). The exporter reads the ``OTEL_EXPORTER_OTLP_*`` variables of its own
(headers, timeout, compression, certificates) and retries what its collector refuses for a while (429,
502, 503, 504, no connection) within its timeout, on the processor's thread: no request waits on it. A
``user:password@`` in the URL is HTTP basic authentication, as libcurl takes it in Triton: it is taken out
of the endpoint (which the exporter's logs may name) and sent as an ``Authorization`` header. Needs the
packages ``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http``; without them the server
refuses to start in this mode. A caller may hand its own tracer provider (tests, embedders) instead.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sonic.server.trace.config import TraceConfig

log = logging.getLogger(__name__)

DEFAULT_URL = "http://localhost:4318/v1/traces"
TRACER_NAME = "triton-server"  # Triton's kTritonTracer
# Which span each activity is an event of, as in Triton: the model's span, its compute span, else the root.
MODEL_EVENTS = frozenset(("REQUEST_START", "QUEUE_START", "REQUEST_END"))
COMPUTE_EVENTS = frozenset(("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"))
MISSING = (
    "--trace-config mode=opentelemetry needs OpenTelemetry's SDK and OTLP/HTTP exporter: "
    "pip install 'sonic-inference[otlp]' (opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)"
)
# Not followed, and named in a warning when set: the endpoint is always --trace-config opentelemetry,url
# (as Triton sets it), and the exporter always speaks OTLP/HTTP protobuf.
UNREAD_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
)
HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")


def endpoint_and_headers(url: str, environ: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The exporter's endpoint (``url`` without a ``user:password@``) and the headers sonic adds: that
    user's basic authentication, unless the exporter's header variables give an ``Authorization`` (a
    header given wins over the URL's user in libcurl too). A URL that is not ``http(s)://host[:port]...``
    is refused at start, naming it (its ``user:password@`` as ``***@``), rather than failing each post."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (a port that is no number raises here)
    except ValueError as exc:
        raise _refused(url, str(exc)) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refused(url, "expected an http:// or https:// URL with a host")
    host = parts.netloc.rpartition("@")[2]
    endpoint = urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    if parts.username is None:
        return endpoint, {}
    # The variable the exporter reads (the traces one first), its names as the exporter lowercases them.
    given = next((environ[name] for name in HEADER_VARIABLES if environ.get(name)), "")
    if any(pair.partition("=")[0].strip().lower() == "authorization" for pair in given.split(",")):
        return endpoint, {}
    user = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    return endpoint, {"Authorization": "Basic " + base64.b64encode(user.encode()).decode()}


def _refused(url: str, why: str) -> ValueError:
    shown = re.sub(r"//[^/@]*@", "//***@", url)  # a user:password is not echoed
    return ValueError(f"--trace-config opentelemetry,url={shown}: {why}")


def _provider(config: TraceConfig) -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
            OTLPSpanExporter,
        )
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON  # noqa: PLC0415
    except ImportError:
        raise ImportError(MISSING) from None
    environ = os.environ  # as the exporter reads its own variables
    attributes = {"service.name": "triton-inference-server"}
    for key, value in config.options:
        if key == "resource":
            name, _, setting = value.partition("=")
            attributes[name] = setting
    for name in UNREAD_VARIABLES:
        if environ.get(name):
            log.warning("%s is set and not read: the OTLP endpoint is --trace-config opentelemetry,url", name)
    endpoint, headers = endpoint_and_headers(config.option("url", DEFAULT_URL), environ)
    # Positive numbers (zeros were refused with the flags); no batch holds more than the queue, so a larger
    # batch size is the queue size, the SDK's limit.
    queue = int(config.option("bsp_max_queue_size", "2048"))
    processor = BatchSpanProcessor(
        OTLPSpanExporter(endpoint=endpoint, headers=headers or None),
        max_queue_size=queue,
        schedule_delay_millis=int(config.option("bsp_schedule_delay", "5000")),
        max_export_batch_size=min(queue, int(config.option("bsp_max_export_batch_size", "512"))),
    )
    # Every span is recorded, as by opentelemetry-cpp's default sampler (the SDK's own default would drop
    # the spans of a request whose client traceparent is not sampled, which Triton still traces at its rate).
    provider = TracerProvider(resource=Resource.create(attributes), sampler=ALWAYS_ON)
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
    """One trace's record for its spans: what the model's span says of the request, the activities (monotonic
    nanoseconds) and the traces of the requests it made (an ensemble's steps, BLS calls)."""

    trace_id: int
    parent_id: int  # the trace of the request that made this one (0: none)
    name: str
    version: int
    request_id: str
    stamps: tuple[tuple[str, int], ...]
    children: tuple[TracedModel, ...] = ()


class OtelExport:
    """One traced request's span maker: its parent context and whether that makes it traced regardless."""

    __slots__ = ("_context", "parent", "parent_sampled")

    def __init__(self, context: OtelTraceContext, parent: Any, parent_sampled: bool) -> None:
        self._context = context
        self.parent = parent
        self.parent_sampled = parent_sampled  # a valid client span context: traced, as Triton forces it

    def spans(self, trace: TracedModel) -> None:
        """The root span ``InferRequest`` with the front end's activities (and ``INFER_RESPONSE_COMPLETE``),
        then the model's spans under it (:meth:`_model_spans`)."""
        from opentelemetry import trace as otel  # noqa: PLC0415

        offset = self._context.offset_ns
        first = min((ns for _, ns in trace.stamps), default=time.perf_counter_ns())
        root = self._context.tracer.start_span(
            "InferRequest", context=self.parent, kind=otel.SpanKind.SERVER, start_time=first + offset
        )
        for name, ns in trace.stamps:
            if name not in MODEL_EVENTS and name not in COMPUTE_EVENTS:
                root.add_event(name, timestamp=ns + offset)
        self._model_spans(trace, otel.set_span_in_context(root))
        root.end(end_time=time.perf_counter_ns() + offset)

    def _model_spans(self, trace: TracedModel, context: Any) -> None:
        """As Triton's: a span named after the model from ``REQUEST_START`` to ``REQUEST_END`` with
        ``QUEUE_START``, its child ``compute`` from ``COMPUTE_START`` to ``COMPUTE_END``, and the spans of
        the requests this one made (its child traces) under the model's span."""
        from opentelemetry import trace as otel  # noqa: PLC0415

        tracer, offset, server = self._context.tracer, self._context.offset_ns, otel.SpanKind.SERVER
        times = dict(trace.stamps)
        if "REQUEST_START" not in times:  # level TENSORS alone: no activity, so the root alone, as Triton
            return
        last = max(times.values())  # a span left open (a request that failed half-way) ends with the trace
        model = tracer.start_span(
            trace.name,
            context=context,
            kind=server,
            start_time=times["REQUEST_START"] + offset,
            attributes={
                "triton.model_name": trace.name,
                "triton.model_version": trace.version,
                "triton.trace_id": trace.trace_id,
                "triton.trace_parent_id": trace.parent_id,
                **({"triton.request_id": trace.request_id} if trace.request_id else {}),
            },
        )
        for name, ns in trace.stamps:
            if name in MODEL_EVENTS:
                model.add_event(name, timestamp=ns + offset)
        if "COMPUTE_START" in times:
            compute = tracer.start_span(
                "compute",
                context=otel.set_span_in_context(model),
                kind=server,
                start_time=times["COMPUTE_START"] + offset,
            )
            for name, ns in trace.stamps:
                if name in COMPUTE_EVENTS:
                    compute.add_event(name, timestamp=ns + offset)
            compute.end(end_time=times.get("COMPUTE_END", last) + offset)
        for child in trace.children:
            self._model_spans(child, otel.set_span_in_context(model))
        model.end(end_time=times.get("REQUEST_END", last) + offset)
