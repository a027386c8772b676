"""OpenTelemetry mode's export end to end: ``sonic serve`` and real Triton 2.51, each given
``--trace-config mode=opentelemetry`` and a URL of a receiver this test starts on 127.0.0.1, port 0.

The receiver decodes what each server posts (sonic: OTLP protobuf, read with opentelemetry-proto's own
classes; Triton 2.51: OTLP JSON, docs/triton-differences.md ``otlp-export``) and the spans of three
requests are checked as Triton makes them: the client's W3C ``traceparent`` continued over HTTP and gRPC,
the model and ``compute`` spans under the root ``InferRequest``, each activity an event of its span, a
BLS ``exec(decoupled=True)`` call's spans under its caller's model span, the resource and the batches.
"""

from __future__ import annotations

import http.server
import json
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from tests.integration.test_trace import (
    BLS_DECOUPLED,
    CONFIG,
    DECOUPLED_POLICY,
    DECOUPLED_TWICE,
    ENSEMBLE,
    MODEL,
    _stream_twice,
)
from tests.integration.triton_helpers import SERVERS, Endpoint, python_model_repository, serving

pytestmark = [pytest.mark.integration]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
# Copied for each call: the HTTP client adds its own headers to the dict it is given.
TRACEPARENT = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
BATCH = 4  # bsp_max_export_batch_size: the spans come in several posts
# Two requests of 3 spans (root, model, compute), the BLS request's 5 (its call's model and compute), the
# ensemble's 6 (root, its model span, each step's model and compute), the decoupled stream's 3.
SPANS = 3 + 3 + 5 + 6 + 3
MODEL_EVENTS = ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
COMPUTE_EVENTS = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]
HTTP_EVENTS = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "INFER_RESPONSE_COMPLETE",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
]
# Triton's; sonic does not write GRPC_WAITREAD_START and GRPC_SEND_END (docs/triton-differences.md, trace-files).
GRPC_EVENTS = [
    "GRPC_WAITREAD_START",
    "GRPC_WAITREAD_END",
    "INFER_RESPONSE_COMPLETE",
    "GRPC_SEND_START",
    "GRPC_SEND_END",
]


@dataclass(frozen=True)
class Span:
    """One exported span, whichever encoding it came in (ids as lowercase hex, "" for no parent)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, object]
    events: list[str]
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class Export:
    """One post to the receiver."""

    path: str
    content_type: str
    resource: dict[str, object]
    scopes: list[str]
    spans: list[Span]


def _value(value: AnyValue) -> object:
    return getattr(value, value.WhichOneof("value") or "string_value")


def _from_protobuf(path: str, body: bytes) -> Export:
    request = ExportTraceServiceRequest.FromString(body)
    resource: dict[str, object] = {}
    scopes: list[str] = []
    spans: list[Span] = []
    for resource_spans in request.resource_spans:
        resource.update({a.key: _value(a.value) for a in resource_spans.resource.attributes})
        for scope_spans in resource_spans.scope_spans:
            scopes.append(scope_spans.scope.name)
            spans.extend(
                Span(
                    s.name,
                    s.trace_id.hex(),
                    s.span_id.hex(),
                    s.parent_span_id.hex(),
                    s.kind,
                    {a.key: _value(a.value) for a in s.attributes},
                    [e.name for e in s.events],
                    s.start_time_unix_nano,
                    s.end_time_unix_nano,
                )
                for s in scope_spans.spans
            )
    return Export(path, "application/x-protobuf", resource, scopes, spans)


def _json_value(value: dict[str, Any]) -> object:
    if "intValue" in value:
        return int(value["intValue"])  # OTLP JSON writes 64-bit integers as strings
    return next(iter(value.values()))


def _from_json(path: str, body: bytes) -> Export:
    request = json.loads(body)
    resource: dict[str, object] = {}
    scopes: list[str] = []
    spans: list[Span] = []
    for resource_spans in request["resourceSpans"]:
        attributes = resource_spans["resource"].get("attributes", [])
        resource.update({a["key"]: _json_value(a["value"]) for a in attributes})
        for scope_spans in resource_spans["scopeSpans"]:
            scopes.append(scope_spans["scope"]["name"])
            spans.extend(
                Span(
                    s["name"],
                    s["traceId"].lower(),
                    s["spanId"].lower(),
                    s.get("parentSpanId", "").lower(),
                    s["kind"],
                    {a["key"]: _json_value(a["value"]) for a in s.get("attributes", [])},
                    [e["name"] for e in s.get("events", [])],
                    int(s["startTimeUnixNano"]),
                    int(s["endTimeUnixNano"]),
                )
                for s in scope_spans["spans"]
            )
    return Export(path, "application/json", resource, scopes, spans)


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1 (port 0): each post decoded, answered 200."""

    def __init__(self) -> None:
        self.exports: queue.Queue[Export | Exception] = queue.Queue()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                content_type = self.headers.get("Content-Type", "")
                try:
                    if content_type == "application/x-protobuf":
                        receiver.exports.put(_from_protobuf(self.path, body))
                    else:
                        receiver.exports.put(_from_json(self.path, body))
                except Exception as exc:  # noqa: BLE001  (the test fails on it, in its thread)
                    receiver.exports.put(exc)
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                del format, args  # quiet: pytest's output is the test's

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def take(self, spans: int) -> list[Export]:
        """The posts until ``spans`` spans have come (each waited for, 30 s at most)."""
        exports: list[Export] = []
        while sum(len(export.spans) for export in exports) < spans:
            export = self.exports.get(timeout=30)
            if isinstance(export, Exception):
                raise export
            exports.append(export)
        return exports


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as started:
        yield started


def _repository(root: Path) -> Path:
    repository = python_model_repository(root, "plain", CONFIG, MODEL)
    nonbatching = CONFIG.replace("max_batch_size: 8", "max_batch_size: 0")
    for name, config, source in (
        ("twice", nonbatching + DECOUPLED_POLICY, DECOUPLED_TWICE),
        ("blsd", nonbatching, BLS_DECOUPLED),
    ):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(config, encoding="utf-8")
        (repository / name / "1" / "model.py").write_text(source, encoding="utf-8")
    (repository / "ens" / "1").mkdir(parents=True)
    (repository / "ens" / "config.pbtxt").write_text(ENSEMBLE, encoding="utf-8")
    return repository


def _requests(endpoint: Endpoint) -> None:
    """``plain`` over HTTP and gRPC with the client's traceparent; ``blsd`` and ``ens`` over HTTP without,
    ``twice`` over a gRPC stream (request id ``d1``)."""
    grpc_address, http_address = endpoint.grpc, endpoint.http
    data = np.array([[1.0, 2.5]], dtype=np.float32)
    client = httpclient.InferenceServerClient(http_address)
    try:
        tensor = httpclient.InferInput("A", [1, 2], "FP32")
        tensor.set_data_from_numpy(data)
        client.infer("plain", [tensor], request_id="h1", headers=dict(TRACEPARENT))
        tensor = httpclient.InferInput("A", [2], "FP32")
        tensor.set_data_from_numpy(data.reshape(2))
        client.infer("blsd", [tensor], request_id="b1")
        tensor = httpclient.InferInput("X", [1, 2], "FP32")
        tensor.set_data_from_numpy(data)
        client.infer("ens", [tensor], request_id="e1")
    finally:
        client.close()
    with grpcclient.InferenceServerClient(grpc_address) as grpc_client:
        tensor = grpcclient.InferInput("A", [1, 2], "FP32")
        tensor.set_data_from_numpy(data)
        grpc_client.infer("plain", [tensor], request_id="g1", headers=dict(TRACEPARENT))
    _stream_twice(endpoint, data.reshape(2))


@pytest.mark.parametrize("kind", SERVERS)
def test_spans_posted_to_the_configured_url(kind: str, tmp_path: Path, receiver: Receiver) -> None:
    flags = [
        *("--trace-config", "mode=opentelemetry", "--trace-config", "level=TIMESTAMPS"),
        *("--trace-config", "rate=1", "--trace-config", f"opentelemetry,url={receiver.url}"),
        *("--trace-config", "opentelemetry,resource=service.name=cms-trigger"),
        *("--trace-config", "opentelemetry,resource=deployment=test"),
        *("--trace-config", "opentelemetry,bsp_schedule_delay=100"),
        *("--trace-config", f"opentelemetry,bsp_max_export_batch_size={BATCH}"),
    ]
    models = ["plain", "twice", "blsd", "ens"]
    with serving(kind, _repository(tmp_path), models, sonic_args=flags, triton_args=flags) as endpoint:
        _requests(endpoint)
        exports = receiver.take(SPANS)
    # As the settings said: batches of at most BATCH spans, to the URL's path, with the resource given.
    assert len(exports) >= -(-SPANS // BATCH)  # at least as many posts as full batches need
    assert all(0 < len(export.spans) <= BATCH for export in exports)
    sonic = kind == "sonic"
    for export in exports:
        assert export.path == "/v1/traces"
        assert export.content_type == ("application/x-protobuf" if sonic else "application/json")
        assert export.scopes == ["triton-server"]
        assert export.resource["service.name"] == "cms-trigger"
        assert export.resource["deployment"] == "test"
        assert export.resource["telemetry.sdk.language"] == ("python" if sonic else "cpp")
    spans = [span for export in exports for span in export.spans]
    assert len(spans) == SPANS
    assert {span.kind for span in spans} == {2}  # SPAN_KIND_SERVER
    by_id = {span.span_id: span for span in spans}

    def model_span(request_id: str, name: str) -> Span:
        [span] = [s for s in spans if s.attributes.get("triton.request_id") == request_id and s.name == name]
        return span

    def children(parent: Span) -> list[Span]:
        return sorted((s for s in spans if s.parent_id == parent.span_id), key=lambda s: s.name)

    def check_model(model: Span, name: str, parent_trace: int) -> None:
        assert model.name == name
        assert model.attributes["triton.model_name"] == name
        assert model.attributes["triton.model_version"] == 1
        assert model.attributes["triton.trace_parent_id"] == parent_trace
        assert model.events == MODEL_EVENTS
        compute = children(model)[0]
        assert compute.name == "compute"
        assert compute.events == COMPUTE_EVENTS
        assert model.start_ns <= compute.start_ns <= compute.end_ns <= model.end_ns

    for request_id, written in (("h1", HTTP_EVENTS), ("g1", GRPC_EVENTS)):
        model = model_span(request_id, "plain")
        check_model(model, "plain", 0)
        assert [s.name for s in children(model)] == ["compute"]
        root = by_id[model.parent_id]
        assert root.name == "InferRequest"
        continued = (TRACE_ID, PARENT_ID)
        if not sonic and request_id == "g1" and (root.trace_id, root.parent_id) != continued:
            # Triton 2.51 over gRPC now and then (about 1 run in 4 here) starts a trace of its own instead
            # of continuing the client's; sonic always continues it.
            continued = (root.trace_id, "")
        assert (root.trace_id, root.parent_id) == continued  # the client's trace continued
        assert model.trace_id == root.trace_id
        unwritten = ("GRPC_WAITREAD_START", "GRPC_SEND_END") if sonic else ()
        assert root.events == [e for e in written if e not in unwritten]
        assert root.start_ns <= model.start_ns <= model.end_ns <= root.end_ns
    # The BLS request: its own trace (no client context); its call's spans under its model span.
    bls = model_span("b1", "blsd")
    check_model(bls, "blsd", 0)
    root = by_id[bls.parent_id]
    assert (root.name, root.parent_id, root.events) == ("InferRequest", "", HTTP_EVENTS)
    compute, call = children(bls)
    assert (compute.name, call.name) == ("compute", "twice")
    check_model(call, "twice", int(str(bls.attributes["triton.trace_id"])))
    assert "triton.request_id" not in call.attributes  # the call's request has no id
    assert {s.trace_id for s in (root, bls, compute, call)} == {root.trace_id} != {TRACE_ID}
    # The ensemble: its model span (no compute of its own), each step's spans under it, with its request id.
    ensemble = model_span("e1", "ens")
    assert ensemble.events == MODEL_EVENTS
    root = by_id[ensemble.parent_id]
    assert (root.name, root.parent_id, root.events) == ("InferRequest", "", HTTP_EVENTS)
    steps = children(ensemble)
    assert [s.name for s in steps] == ["plain", "plain"]
    for step in steps:
        check_model(step, "plain", int(str(ensemble.attributes["triton.trace_id"])))
        assert step.attributes["triton.request_id"] == "e1"
    # The decoupled model's request: one compute, a send per response (the root's events).
    streamed = model_span("d1", "twice")
    check_model(streamed, "twice", 0)
    root = by_id[streamed.parent_id]
    sends = ["GRPC_SEND_START", "GRPC_SEND_END"] * 2
    events = [*GRPC_EVENTS[:3], *(e for e in sends if not sonic or e != "GRPC_SEND_END")]
    assert root.events == [e for e in events if not sonic or e != "GRPC_WAITREAD_START"]
    trace_ids = [s.attributes["triton.trace_id"] for s in spans if "triton.trace_id" in s.attributes]
    assert len(trace_ids) == len(set(trace_ids)) == 8
