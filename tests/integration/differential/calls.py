"""One call to one server and its outcome in a comparable form: status, message, normalised answer.

gRPC calls send serialized bytes through a generic method handle, so a case may carry a malformed
message; HTTP calls are raw ``http.client`` requests, so a case may carry any body and headers.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2

SERVICE = "/inference.GRPCInferenceService/"
CALL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Endpoint:
    kind: str  # "triton" or "sonic"
    grpc: str
    http: str


@dataclass(frozen=True)
class Pair:
    triton: Endpoint | None  # None while Triton's answers are replayed from a recording
    sonic: Endpoint


@dataclass(frozen=True)
class Outcome:
    """What a server answered: a gRPC status name or HTTP status, the error message, the answer."""

    code: str
    message: str = ""
    answer: Any = None


@dataclass(frozen=True)
class GrpcCall:
    method: str  # e.g. "ModelInfer"
    payload: bytes  # serialized request (possibly malformed)
    what: str = ""  # a line saying what the case is, for failure reports
    faults: int = 0  # how many things are wrong in it, when it is a generated inference request
    metadata: tuple[tuple[str, str], ...] = ()  # gRPC headers sent with it


@dataclass(frozen=True)
class HttpCall:
    method: str  # GET or POST
    path: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    what: str = ""
    faults: int = 0  # as GrpcCall.faults


Call = GrpcCall | HttpCall


def _response_type(method: str) -> Any:
    return getattr(service_pb2, method + "Response")


def stream_outcome(channel: grpc.Channel, call: GrpcCall) -> Outcome:
    """``ModelStreamInfer`` of one request (the client then half-closes): the stream's messages in order,
    each an answer or an error; the first error's words are the outcome's message (code ``STREAM_ERROR``)."""
    handle = channel.stream_stream(SERVICE + call.method, request_serializer=None, response_deserializer=None)
    messages: list[Any] = []
    try:
        for data in handle(iter([call.payload]), timeout=CALL_TIMEOUT_S, metadata=call.metadata or None):
            message = service_pb2.ModelStreamInferResponse.FromString(data)
            if message.error_message:
                messages.append({"error": message.error_message})
            else:
                messages.append(
                    json_format.MessageToDict(message.infer_response, preserving_proto_field_name=True)
                )
    except grpc.RpcError as exc:
        return Outcome(exc.code().name, exc.details() or "", messages)
    errors = [m["error"] for m in messages if "error" in m]
    return Outcome("STREAM_ERROR" if errors else "OK", errors[0] if errors else "", messages)


def grpc_outcome(channel: grpc.Channel, call: GrpcCall) -> Outcome:
    if call.method == "ModelStreamInfer":
        return stream_outcome(channel, call)
    handle = channel.unary_unary(SERVICE + call.method, request_serializer=None, response_deserializer=None)
    try:
        data = handle(call.payload, timeout=CALL_TIMEOUT_S, metadata=call.metadata or None)
    except grpc.RpcError as exc:
        return Outcome(exc.code().name, exc.details() or "")
    response_type = _response_type(call.method)
    message = response_type.FromString(data)
    return Outcome("OK", answer=json_format.MessageToDict(message, preserving_proto_field_name=True))


def _split_binary(body: bytes, header_length: str | None) -> Any:
    if header_length is None:
        return json.loads(body) if body else None
    length = int(header_length)
    head = json.loads(body[:length])
    rest = body[length:]
    for output in head.get("outputs", []):
        size = output.get("parameters", {}).get("binary_data_size")
        if size is not None:
            output["binary"] = rest[:size].hex()
            rest = rest[size:]
    return head


def http_outcome(address: str, call: HttpCall) -> Outcome:
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=CALL_TIMEOUT_S)
    try:
        connection.request(call.method, call.path, body=call.body or None, headers=call.headers)
        response = connection.getresponse()
        body = response.read()
        header_length = response.getheader("Inference-Header-Content-Length")
    finally:
        connection.close()
    code = str(response.status)
    try:
        answer = _split_binary(body, header_length)
    except (ValueError, UnicodeDecodeError):
        return Outcome(code, "", {"text": body.decode(errors="replace")})
    if response.status >= 400:
        message = answer.get("error", "") if isinstance(answer, dict) else ""
        return Outcome(code, str(message))
    return Outcome(code, answer=answer)


class Caller:
    """Calls to one server over one gRPC channel (kept for the module) and short HTTP connections."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.channel = grpc.insecure_channel(endpoint.grpc)

    def __call__(self, call: Call) -> Outcome:
        if isinstance(call, GrpcCall):
            return grpc_outcome(self.channel, call)
        return http_outcome(self.endpoint.http, call)

    def close(self) -> None:
        self.channel.close()
