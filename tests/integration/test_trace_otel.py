"""Triton's trace extension in OpenTelemetry mode (``--trace-config mode=opentelemetry``): the spans of a
traced request, as Triton 2.51 makes them, continuing the client's W3C ``traceparent``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sonic.server.config import GrpcConfig, HttpConfig, ServerConfig
from sonic.server.server import Server
from sonic.server.trace.config import TraceFlags, parse_trace_flags

pytestmark = pytest.mark.integration

T = TypeVar("T")
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def _inputs(module, shape: tuple[int, int] = (1, 16)) -> list[object]:  # type: ignore[no-untyped-def]
    tensor = module.InferInput("INPUT0", list(shape), "FP32")
    tensor.set_data_from_numpy(np.ones(shape, np.float32))
    return [tensor]


def _traced(
    repository: Path, *trace_config: str
) -> tuple[InMemorySpanExporter, TracerProvider, ServerConfig]:
    """A server configuration with these ``--trace-config`` values, and a provider keeping its spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace, _ = parse_trace_flags(TraceFlags(trace_config=trace_config), environ={})
    config = ServerConfig(
        model_repositories=(repository,), grpc=GrpcConfig(port=0), http=HttpConfig(port=0), trace=trace
    )
    return exporter, provider, config


async def _serving(
    config: ServerConfig, provider: TracerProvider, work: Callable[[Server], Awaitable[T]]
) -> T:
    """``work`` done on a server started with ``config`` (its spans to ``provider``), stopped after."""
    server = Server(config, tracer_provider=provider)
    await server.start()
    try:
        return await work(server)
    finally:
        await server.shutdown()


def test_opentelemetry_mode_spans(test_repository: Path) -> None:
    # rate 1000: only the requests that carry a sampled client trace are traced (Triton forces them).
    exporter, provider, config = _traced(test_repository, "mode=opentelemetry", "level=TIMESTAMPS")
    traceparent = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}

    async def requests(server: Server) -> dict[str, object]:
        async with grpcaio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as client:
            await client.infer("identity", _inputs(grpcaio), request_id="untraced")
            await client.infer("identity", _inputs(grpcaio), headers=traceparent, request_id="g1")
        async with httpaio.InferenceServerClient(f"127.0.0.1:{server.http_port}") as http:
            await http.infer("identity", _inputs(httpaio), headers=traceparent, request_id="h1")
            settings: dict[str, object] = await http.get_trace_settings()
        return settings

    settings = asyncio.run(_serving(config, provider, requests))
    assert settings["trace_mode"] == "opentelemetry"
    assert "trace_file" not in settings
    assert "log_frequency" not in settings
    assert settings["bsp_max_queue_size"] == "2048"
    spans = exporter.get_finished_spans()
    models = [s for s in spans if s.name == "identity"]
    assert sorted(str((s.attributes or {})["triton.request_id"]) for s in models) == ["g1", "h1"]
    for model in models:
        assert f"{model.context.trace_id:032x}" == TRACE_ID  # the client's trace continued
        root = next(
            s for s in spans if model.parent is not None and s.context.span_id == model.parent.span_id
        )
        assert root.name == "InferRequest"
        assert root.parent is not None
        assert f"{root.parent.span_id:016x}" == PARENT_ID
        attributes = model.attributes or {}
        assert attributes["triton.model_name"] == "identity"
        assert attributes["triton.model_version"] == 1
        compute = next(s for s in spans if s.parent is not None and s.parent.span_id == model.context.span_id)
        assert compute.name == "compute"
        assert [e.name for e in compute.events] == [
            "COMPUTE_START",
            "COMPUTE_INPUT_END",
            "COMPUTE_OUTPUT_START",
            "COMPUTE_END",
        ]
        assert "REQUEST_START" in [e.name for e in model.events]
        assert root.start_time is not None
        assert model.start_time is not None
        assert root.start_time <= model.start_time
    root_events = {e.name for s in spans if s.name == "InferRequest" for e in s.events}
    assert {"HTTP_RECV_START", "HTTP_SEND_END", "GRPC_WAITREAD_END", "GRPC_SEND_START"} <= root_events


def test_level_tensors_is_said_to_add_nothing(
    test_repository: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As Triton 2.51: level TENSORS in OpenTelemetry mode logs "Tensor level tracing is not supported by the
    mode: opentelemetry"; alone, a traced request's export is its root span without events."""
    exporter, provider, config = _traced(test_repository, "mode=opentelemetry", "level=TENSORS", "rate=1")

    async def request(server: Server) -> None:
        async with httpaio.InferenceServerClient(f"127.0.0.1:{server.http_port}") as http:
            await http.infer("identity", _inputs(httpaio), request_id="t1")

    asyncio.run(_serving(config, provider, request))
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any(
        m.startswith("Tensor level tracing is not supported by the mode: opentelemetry") for m in errors
    )
    [root] = exporter.get_finished_spans()
    assert (root.name, list(root.events)) == ("InferRequest", [])
