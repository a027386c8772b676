"""Structured request logs (``--log-format json --log-requests``) and OpenTelemetry spans."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess
from sonic.server.config import GrpcConfig, HttpConfig, ServerConfig
from sonic.server.server import Server

pytestmark = pytest.mark.integration


def _inputs(module, shape: tuple[int, int] = (1, 16)) -> list[object]:  # type: ignore[no-untyped-def]
    tensor = module.InferInput("INPUT0", list(shape), "FP32")
    tensor.set_data_from_numpy(np.ones(shape, np.float32))
    return [tensor]


def test_json_request_logs(test_repository: Path) -> None:
    args = ["--http-port", "0", "--log-format", "json", "--log-requests"]
    with ServerProcess.start([test_repository], extra_args=args) as process:
        client = httpclient.InferenceServerClient(process.http_address)
        try:
            client.infer("identity", _inputs(httpclient), request_id="event-42")
            client.infer("identity", _inputs(httpclient))
            with pytest.raises(InferenceServerException):
                client.infer("identity", _inputs(httpclient, (1, 15)), request_id="bad-1")
        finally:
            client.close()
        process.stop()
        lines = process.log_path.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    requests = [r for r in records if r["logger"] == "sonic.requests"]
    assert [r["status"] for r in requests] == [200, 200, 400]
    assert requests[0]["request_id"] == "event-42"
    assert requests[1]["request_id"].startswith("s")  # a server-side id when the client sent none
    assert requests[2]["request_id"] == "bad-1"
    assert "unexpected shape" in requests[2]["error"]
    assert all(r["model"] == "identity" and r["duration_us"] >= 0 for r in requests)
    assert any(r["message"].startswith("serving") for r in records)


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def test_opentelemetry_spans(test_repository: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    config = ServerConfig(
        model_repositories=(test_repository,),
        grpc=GrpcConfig(port=0),
        http=HttpConfig(port=0),
        otel_tracing=True,
    )
    traceparent = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}

    async def main() -> None:
        server = Server(config, tracer_provider=provider)
        await server.start()
        try:
            async with grpcaio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as client:
                await client.infer("identity", _inputs(grpcaio), request_id="traced")
                with pytest.raises(InferenceServerException):
                    await client.infer("no_such_model", _inputs(grpcaio))
                await client.infer("identity", _inputs(grpcaio), headers=traceparent)
            async with httpaio.InferenceServerClient(f"127.0.0.1:{server.http_port}") as http:
                await http.infer("identity", _inputs(httpaio), headers=traceparent, request_id="over-http")
        finally:
            await server.shutdown()

    asyncio.run(main())
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["sonic.infer"] * 4
    ok, failed, grpc_child, http_child = spans
    assert ok.attributes is not None
    assert failed.attributes is not None
    assert ok.attributes["sonic.request_id"] == "traced"
    assert ok.attributes["sonic.model"] == "identity"
    assert ok.attributes["sonic.status"] == 200
    assert ok.parent is None  # no trace context sent: a new trace
    assert failed.attributes["sonic.status"] == 404
    assert not failed.status.is_ok
    for child in (grpc_child, http_child):  # the client's trace continues on the server
        assert child.context is not None
        assert child.parent is not None
        assert f"{child.context.trace_id:032x}" == TRACE_ID
        assert f"{child.parent.span_id:016x}" == PARENT_ID
    assert http_child.attributes is not None
    assert http_child.attributes["sonic.request_id"] == "over-http"
