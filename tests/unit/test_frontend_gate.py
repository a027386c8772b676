"""The call gate the front ends share: guard checks, trace context, and errors mapped to statuses, once."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider

from sonic.protocol.errors import InternalError, NotFoundError, UnauthenticatedError, http_status
from sonic.protocol.grpc_codec import grpc_status
from sonic.server.config import AuthConfig, SecurityConfig, ServerConfig
from sonic.server.frontends.base import host_port
from sonic.server.frontends.gate import CallGate, as_sonic_error, grpc_call_kind
from sonic.server.guard import CallKind
from sonic.server.server import Server

PEER = "ipv4:10.0.0.7:50512"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _gate(tmp_path: Path, auth: AuthConfig | None = None, *, otel_tracing: bool = False) -> CallGate:
    config = ServerConfig(
        model_repositories=(tmp_path,), security=SecurityConfig(auth=auth), otel_tracing=otel_tracing
    )
    server = Server(config, tracer_provider=TracerProvider())
    return CallGate(server.dataplane, server.guard)


def test_a_plain_server_checks_nothing_and_reads_no_trace_headers(tmp_path: Path) -> None:
    gate = _gate(tmp_path)
    assert gate.guard is None
    gate.admit_grpc("ModelInfer", None, PEER)
    gate.admit(CallKind.CONTROL, None, "10.0.0.7:50512", "10.0.0.7")
    assert gate.trace_context({"traceparent": TRACEPARENT}.get) is None


def test_tokens_are_checked_for_every_protocol_alike(tmp_path: Path) -> None:
    gate = _gate(tmp_path, AuthConfig(tokens=frozenset({"s3cret"})))
    with pytest.raises(UnauthenticatedError, match="authentication required"):
        gate.admit_grpc("ModelInfer", None, PEER)
    with pytest.raises(UnauthenticatedError, match="not valid"):
        gate.admit(CallKind.INFER, "Bearer wrong", "10.0.0.7:50512", "10.0.0.7")
    gate.admit_grpc("ModelInfer", "Bearer s3cret", PEER)
    gate.admit(CallKind.INFER, "Bearer s3cret", "10.0.0.7:50512", "10.0.0.7")
    gate.admit_grpc("HealthCheck", None, PEER)  # probes stay open by default


def test_trace_headers_are_read_while_spans_are_made(tmp_path: Path) -> None:
    gate = _gate(tmp_path, otel_tracing=True)
    headers = {"traceparent": TRACEPARENT, "authorization": "Bearer x"}
    assert gate.trace_context(headers.get) == {"traceparent": TRACEPARENT}


@pytest.mark.parametrize(
    ("method", "kind"),
    [
        ("ServerLive", CallKind.HEALTH),
        ("HealthCheck", CallKind.HEALTH),
        ("ModelReady", CallKind.HEALTH),
        ("RepositoryIndex", CallKind.INDEX),
        ("ModelInfer", CallKind.INFER),
        ("ModelStreamInfer", CallKind.INFER),
        ("ModelConfig", CallKind.CONTROL),
        ("RepositoryModelLoad", CallKind.CONTROL),
    ],
)
def test_grpc_methods_map_to_guard_kinds(method: str, kind: CallKind) -> None:
    assert grpc_call_kind(method) is kind


def test_failures_map_through_the_one_status_table(caplog: pytest.LogCaptureFixture) -> None:
    ours = NotFoundError("no model 'x'")
    assert as_sonic_error(ours) is ours
    with caplog.at_level(logging.ERROR, logger="sonic.server.frontends.gate"):
        unexpected = as_sonic_error(RuntimeError("boom"))
    assert isinstance(unexpected, InternalError)
    assert "boom" in unexpected.message
    assert (grpc_status(unexpected), int(http_status(unexpected))) == (grpc.StatusCode.INTERNAL, 500)
    assert [r.message for r in caplog.records] == ["unexpected error"]  # logged, with its traceback


def test_addresses_bracket_ipv6_hosts() -> None:
    assert host_port("127.0.0.1", 8001) == "127.0.0.1:8001"
    assert host_port("::1", 8001) == "[::1]:8001"
