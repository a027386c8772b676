"""OpenTelemetry mode's OTLP/HTTP exporter (sonic.server.trace.otlp): what it posts, with which headers, and
what it does when the collector refuses or is not there (end to end: tests/integration/test_trace_otlp.py)."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sonic.server.trace.otlp import OtlpHttpSpanExporter, parse_headers, unread_variables

pytestmark = pytest.mark.unit


class _Collector:
    """A receiver answering each post with ``status``; what it was sent, kept."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.posts: list[tuple[str, dict[str, str], bytes]] = []
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.posts.append((self.path, dict(self.headers), body))
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


def _spans(count: int) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("triton-server")
    for n in range(count):
        tracer.start_span(f"span{n}").end()
    return list(memory.get_finished_spans())


def test_a_batch_is_posted_as_protobuf_with_the_headers_given(
    collector: _Collector, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20abc, x-tenant = cms "}
    exporter = OtlpHttpSpanExporter(collector.url, environ)
    result = exporter.export(_spans(3))
    [(path, headers, body)] = collector.posts
    assert path == "/otlp/v1/traces?x=1"
    assert headers["Content-Type"] == "application/x-protobuf"
    assert headers["authorization"] == "Bearer abc"
    assert headers["x-tenant"] == "cms"
    decoded = ExportTraceServiceRequest.FromString(body)
    names = [s.name for r in decoded.resource_spans for scope in r.scope_spans for s in scope.spans]
    assert names == ["span0", "span1", "span2"]
    assert "Authorization" not in headers
    if collector.status == 200:
        assert result is SpanExportResult.SUCCESS
        assert not caplog.records
    else:  # refused: the batch is dropped with a warning saying why
        assert result is SpanExportResult.FAILURE
        [record] = caplog.records
        assert record.levelno == logging.WARNING
        assert "(HTTP 503 Service Unavailable); they are dropped" in record.getMessage()


def test_a_collector_not_there_drops_the_batch_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as unused:  # a port nothing listens on once closed
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    exporter = OtlpHttpSpanExporter(f"http://127.0.0.1:{port}/v1/traces", {})
    with caplog.at_level(logging.DEBUG, logger="sonic.server.trace.otlp"):
        assert exporter.export(_spans(1)) is SpanExportResult.FAILURE
        assert exporter.export(_spans(1)) is SpanExportResult.FAILURE
    levels = [r.levelno for r in caplog.records]
    assert levels == [logging.WARNING, logging.DEBUG]  # the first failure is a warning, the next ones debug
    assert f"127.0.0.1:{port}/v1/traces failed" in caplog.records[0].getMessage()
    exporter.shutdown()
    assert exporter.export(_spans(1)) is SpanExportResult.FAILURE


def test_a_user_in_the_url_is_basic_authentication_and_not_logged(
    collector: _Collector, caplog: pytest.LogCaptureFixture
) -> None:
    url = collector.url.replace("http://", "http://cms:s%40cret@")
    exporter = OtlpHttpSpanExporter(url, {})
    exporter.export(_spans(1))
    [(_, headers, _)] = collector.posts
    assert headers["Authorization"] == "Basic Y21zOnNAY3JldA=="  # cms:s@cret
    assert "cret" not in exporter.url
    assert "cret" not in caplog.text  # the 503 warning names the URL without them


def test_headers_and_variables() -> None:
    assert parse_headers("a=1,b=x%3Dy,,") == {"a": "1", "b": "x=y"}
    with pytest.raises(ValueError, match="OTLP header 'novalue': expected name=value"):
        parse_headers("a=1,novalue")
    environ = {
        "OTEL_EXPORTER_OTLP_HEADERS": "a=1",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://elsewhere",
        "OTEL_BSP_MAX_QUEUE_SIZE": "10",
    }
    assert unread_variables(environ) == [
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]


@pytest.mark.parametrize("url", ["collector:4318/v1/traces", "grpc://collector:4317", "http:///v1/traces"])
def test_a_url_without_http_or_a_host_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match=f"opentelemetry,url={url}: expected an http:// or https:// URL"):
        OtlpHttpSpanExporter(url, {})
