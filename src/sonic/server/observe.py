"""Per-request observation hooks: a structured log record and an OpenTelemetry span per inference.

Both are off by default; when neither is on the data plane calls the model directly and pays
nothing. Requests without a client id get a server-side one (``s<pid>-<n>``) for the logs only,
so every record can be followed; the response echoes only what the client sent, as Triton does.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sonic.protocol.errors import SonicError, http_status
from sonic.protocol.types import InferRequest, InferResponse

log = logging.getLogger("sonic.requests")

Infer = Callable[[InferRequest], Awaitable[InferResponse]]

# W3C trace context: a span continues the client's trace when these arrive as HTTP headers / gRPC metadata.
TRACE_HEADERS = ("traceparent", "tracestate")


def load_tracer(tracer_provider: Any = None) -> Any:
    try:
        from opentelemetry import trace  # noqa: PLC0415  (optional extra)
    except ImportError:
        msg = "request tracing needs OpenTelemetry: pip install 'sonic-inference[otel]' and an SDK/exporter"
        raise ImportError(msg) from None
    return trace.get_tracer("sonic.server", tracer_provider=tracer_provider)


class RequestObserver:
    def __init__(self, *, log_requests: bool, tracer: Any = None) -> None:
        self._log_requests = log_requests
        self._tracer = tracer
        self.tracing = tracer is not None
        self._extract: Any = None
        if tracer is not None:
            from opentelemetry import propagate  # noqa: PLC0415  (present whenever a tracer is)

            self._extract = propagate.extract
        self._ids = itertools.count(1)
        self._prefix = f"s{os.getpid()}-"

    async def __call__(
        self, infer: Infer, request: InferRequest, trace_headers: dict[str, str] | None = None
    ) -> InferResponse:
        """``trace_headers``: the request's W3C ``traceparent``/``tracestate``, the parent of its span."""
        request_id = request.request_id or f"{self._prefix}{next(self._ids)}"
        started = time.perf_counter_ns()
        if self._tracer is None:
            return await self._run(infer, request, request_id, started, None)
        attributes = {
            "sonic.model": request.model_name,
            "sonic.model_version": request.model_version,
            "sonic.request_id": request_id,
        }
        parent = self._extract(trace_headers) if trace_headers else None
        with self._tracer.start_as_current_span("sonic.infer", context=parent, attributes=attributes) as span:
            return await self._run(infer, request, request_id, started, span)

    async def _run(
        self, infer: Infer, request: InferRequest, request_id: str, started: int, span: Any
    ) -> InferResponse:
        try:
            response = await infer(request)
        except SonicError as exc:
            self._record(request, request_id, started, int(http_status(exc)), exc.message, span)
            raise
        except Exception as exc:
            self._record(request, request_id, started, 500, repr(exc), span)
            raise
        self._record(request, request_id, started, 200, "", span)
        return response

    def _record(
        self, request: InferRequest, request_id: str, started: int, status: int, error: str, span: Any
    ) -> None:
        duration_us = (time.perf_counter_ns() - started) // 1000
        if span is not None:
            span.set_attribute("sonic.status", status)
            if error:
                span.set_attribute("sonic.error", error)
        if self._log_requests:
            fields = {
                "request_id": request_id,
                "model": request.model_name,
                "version": request.model_version,
                "status": status,
                "duration_us": duration_us,
            }
            if error:
                fields["error"] = error
            log.info("inference %s", "ok" if status == 200 else "failed", extra=fields)
