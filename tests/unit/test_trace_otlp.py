"""OpenTelemetry mode's export through the SDK's OTLP/HTTP exporter (sonic.server.trace.otel): what is posted
to ``opentelemetry,url``, with which headers, a URL's ``user:password@``, and what a collector that refuses
or is not there costs (end to end against sonic and Triton: tests/integration/test_trace_otlp.py)."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sonic.server.trace.config import TraceFlags, parse_trace_flags
from sonic.server.trace.otel import OtelTraceContext, TracedModel, endpoint_and_headers

pytestmark = pytest.mark.unit

EXPORTER_LOGGER = "opentelemetry.exporter"
# Timestamps of one request as the trace records them (monotonic ns): 3 spans (root, model, compute).
STAMPS = (
    ("HTTP_RECV_START", 1_000),
    ("REQUEST_START", 2_000),
    ("QUEUE_START", 3_000),
    ("COMPUTE_START", 4_000),
    ("COMPUTE_END", 5_000),
    ("REQUEST_END", 6_000),
)


class _Collector:
    """A receiver answering each post with ``status``; what it was sent, kept."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.posts: list[tuple[str, dict[str, str], bytes]] = []  # headers' names lowercased
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.posts.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                del format, args

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/otlp/v1/traces?x=1"


@pytest.fixture(params=[200, 503])
def collector(request: pytest.FixtureRequest) -> Iterator[_Collector]:
    started = _Collector(request.param)
    thread = threading.Thread(target=started.server.serve_forever, daemon=True)
    thread.start()
    yield started
    started.server.shutdown()
    started.server.server_close()
    thread.join()


def _export(
    monkeypatch: pytest.MonkeyPatch, url: str, requests: int, *options: str, headers: str = ""
) -> None:
    """The spans of ``requests`` traced requests made and exported to ``url`` (by default in one batch: the
    queue and the batch are larger), then the context closed, which sends them. The exporter reads its own
    variables: ``OTEL_EXPORTER_OTLP_HEADERS`` is ``headers``, and its timeout (seconds, as the Python
    exporter reads it) is below its first retry's backoff (0.8 s or more), so one try per batch."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", headers)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.5")
    config, _ = parse_trace_flags(
        TraceFlags(trace_config=["mode=opentelemetry", f"opentelemetry,url={url}", *options]), environ={}
    )
    context = OtelTraceContext(config)
    try:
        for n in range(requests):
            context.export(None).spans(TracedModel(n + 1, 0, "identity", 1, f"r{n}", STAMPS))
    finally:
        context.close()


def test_the_spans_are_posted_to_the_url_with_the_headers_given(
    collector: _Collector, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        _export(monkeypatch, collector.url, 40, headers="authorization=Bearer%20abc, x-tenant = cms ")
    [(path, headers, body)] = collector.posts  # 120 spans, one batch: a refusal is not retried past 0.5 s
    assert path == "/otlp/v1/traces?x=1"
    assert headers["content-type"] == "application/x-protobuf"
    assert headers["authorization"] == "Bearer abc"
    assert headers["x-tenant"] == "cms"
    decoded = ExportTraceServiceRequest.FromString(body)
    names = [s.name for r in decoded.resource_spans for scope in r.scope_spans for s in scope.spans]
    assert len(names) == 120
    assert set(names) == {"InferRequest", "identity", "compute"}
    exporter_records = [r for r in caplog.records if r.name.startswith(EXPORTER_LOGGER)]
    if collector.status == 200:
        assert not exporter_records
    else:  # refused: the batch is dropped with one error saying so, from the processor's thread, not ours
        [record] = exporter_records
        assert record.levelno == logging.ERROR
        assert "Failed to export spans batch" in record.getMessage()
        assert record.threadName != threading.current_thread().name


def test_a_collector_not_there_costs_a_bounded_log_and_no_request_waits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as unused:  # a port nothing listens on once closed
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/traces"
    with caplog.at_level(logging.DEBUG, logger="opentelemetry"):
        _export(monkeypatch, url, 100)
    records = [r for r in caplog.records if r.name.startswith(EXPORTER_LOGGER)]
    # 300 spans, one batch: one error for it (not one per span), logged by the batch processor's thread.
    assert [r.levelno for r in records if r.levelno >= logging.WARNING] == [logging.ERROR]
    assert "Failed to export spans batch" in records[-1].getMessage()
    assert threading.current_thread().name not in {r.threadName for r in records}
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="opentelemetry"):  # a queue of 10: 290 spans dropped
        _export(monkeypatch, url, 100, "opentelemetry,bsp_max_queue_size=10")
    full = [r for r in caplog.records if r.getMessage() == "Queue full, dropping Span."]
    failed = [r for r in caplog.records if r.name.startswith(EXPORTER_LOGGER)]
    # The SDK says so at most once per 20 s, the exporter once per batch of 10 it had time to try.
    assert 1 <= len(full) <= 2
    assert 1 <= len(failed) <= 10
    assert threading.current_thread().name not in {r.threadName for r in failed}


def test_a_user_in_the_url_is_basic_authentication_and_not_logged(
    collector: _Collector, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        _export(monkeypatch, collector.url.replace("http://", "http://cms:s%40cret@"), 1)
    [(path, headers, _)] = collector.posts
    assert path == "/otlp/v1/traces?x=1"
    assert headers["authorization"] == "Basic Y21zOnNAY3JldA=="  # cms:s@cret
    assert "cret" not in caplog.text  # the 503's error and the debug lines name the URL without them


def test_a_header_given_wins_over_the_urls_user() -> None:
    url = "https://cms:secret@collector:4318/v1/traces"
    assert endpoint_and_headers(url, {}) == (
        "https://collector:4318/v1/traces",
        {"Authorization": "Basic Y21zOnNlY3JldA=="},
    )
    # The traces variable first, as the exporter reads them; its Authorization is the exporter's to send.
    given = {
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x=1, Authorization=Bearer%20t",
        "OTEL_EXPORTER_OTLP_HEADERS": "y=2",
    }
    assert endpoint_and_headers(url, given) == ("https://collector:4318/v1/traces", {})
    assert endpoint_and_headers(url, {"OTEL_EXPORTER_OTLP_HEADERS": "y=2"})[1] != {}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("collector:4318/v1/traces", "collector:4318/v1/traces: expected an http:// or https:// URL"),
        ("grpc://collector:4317", "grpc://collector:4317: expected an http:// or https:// URL"),
        ("http:///v1/traces", "http:///v1/traces: expected an http:// or https:// URL"),
        ("ftp://u:pw@collector/", r"ftp://\*\*\*@collector/: expected an http:// or https:// URL"),
        ("http://collector:43x8/v1/traces", "http://collector:43x8/v1/traces: Port could not be cast"),
        ("http://u:pw@[::1/v1/traces", r"http://\*\*\*@\[::1/v1/traces: Invalid IPv6 URL"),
    ],
)
def test_a_url_without_http_or_a_host_is_refused_at_start(url: str, message: str) -> None:
    config, _ = parse_trace_flags(
        TraceFlags(trace_config=["mode=opentelemetry", f"opentelemetry,url={url}"]), environ={}
    )
    with pytest.raises(ValueError, match=f"^--trace-config opentelemetry,url={message}") as refused:
        OtelTraceContext(config)
    assert "pw" not in str(refused.value)
