"""OTLP over HTTP: OpenTelemetry mode's spans posted to the collector's URL as protobuf.

The SDK's batch span processor (Triton's ``bsp_*`` settings) hands each batch to
:meth:`OtlpHttpSpanExporter.export` on its own worker thread, never the event loop's. A batch is encoded
as the SDK's own OTLP exporters encode it (``opentelemetry-exporter-otlp-proto-common``: one
``ExportTraceServiceRequest``) and posted with ``Content-Type: application/x-protobuf``, one try with
opentelemetry-cpp's default timeout (10 s). A batch the collector refuses, or that cannot be posted, is
dropped as Triton's exporter drops it: the requests it traced were answered long ago, and waiting would
only let the queue grow. The first failure is a warning, the ones after it until a success are debug.

Headers come from ``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` (else ``OTEL_EXPORTER_OTLP_HEADERS``), ``k=v``
pairs separated by commas, URL-encoded, as opentelemetry-cpp reads them; a ``user:password@`` in the URL
is HTTP basic authentication (unless those headers have an ``Authorization``), as libcurl takes it, and is
left out of what is logged. The other ``OTEL_EXPORTER_OTLP_*``
variables (protocol, compression, certificates, timeout) are not read: :func:`unread_variables` names
those set, and the server warns about them.
"""

from __future__ import annotations

import base64
import http.client
import logging
import os
import ssl
import urllib.parse
from collections.abc import Mapping, Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0  # opentelemetry-cpp's OtlpHttpExporterOptions default
CONTENT_TYPE = "application/x-protobuf"
HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
READ_VARIABLES = frozenset(HEADER_VARIABLES)


def unread_variables(environ: Mapping[str, str]) -> list[str]:
    """The ``OTEL_EXPORTER_OTLP_*`` variables set that this exporter does not follow (its URL is
    ``--trace-config opentelemetry,url``, as Triton's)."""
    return sorted(
        name for name in environ if name.startswith("OTEL_EXPORTER_OTLP_") and name not in READ_VARIABLES
    )


def parse_headers(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` (URL-encoded) as a header map; a pair without ``=`` is refused, naming it."""
    headers: dict[str, str] = {}
    for pair in text.split(","):
        if not pair.strip():
            continue
        name, equals, value = pair.partition("=")
        if not equals or not name.strip():
            msg = f"OTLP header {pair!r}: expected name=value (in OTEL_EXPORTER_OTLP_HEADERS form k=v,k2=v2)"
            raise ValueError(msg)
        headers[urllib.parse.unquote(name.strip())] = urllib.parse.unquote(value.strip())
    return headers


class OtlpHttpSpanExporter(SpanExporter):
    """Posts each batch of spans to ``url`` (``http://`` or ``https://``, the host's certificate checked)."""

    def __init__(
        self, url: str, environ: Mapping[str, str] | None = None, timeout_s: float = TIMEOUT_S
    ) -> None:
        environ = os.environ if environ is None else environ
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            msg = f"--trace-config opentelemetry,url={url}: expected an http:// or https:// URL with a host"
            raise ValueError(msg)
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        # What the logs name: the URL without its user and password.
        self.url = urllib.parse.urlunsplit(
            (parts.scheme, parts.netloc.rpartition("@")[2], self._path, "", "")
        )
        text = next((environ[name] for name in HEADER_VARIABLES if environ.get(name)), "")
        self._headers = {**parse_headers(text), "Content-Type": CONTENT_TYPE}
        if parts.username is not None:  # user:password@ in the URL: HTTP basic authentication, as curl's
            secret = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self._headers.setdefault("Authorization", "Basic " + base64.b64encode(secret.encode()).decode())
        self._timeout_s = timeout_s
        self._failing = False
        self._shut_down = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shut_down:
            return SpanExportResult.FAILURE
        body = encode_spans(spans).SerializeToString()
        try:
            status, reason = self._post(body)
        except (OSError, http.client.HTTPException) as exc:
            return self._failed(len(spans), f"{type(exc).__name__}: {exc}")
        if not 200 <= status < 300:
            return self._failed(len(spans), f"HTTP {status} {reason}")
        if self._failing:
            log.info("OTLP export to %s works again", self.url)
            self._failing = False
        return SpanExportResult.SUCCESS

    def _post(self, body: bytes) -> tuple[int, str]:
        connection: http.client.HTTPConnection
        if self._https:
            context = ssl.create_default_context()
            connection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeout_s, context=context
            )
        else:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
        try:
            connection.request("POST", self._path, body=body, headers=self._headers)
            response = connection.getresponse()
            response.read()  # the collector's ExportTraceServiceResponse: partial successes are its own log's
            return response.status, response.reason
        finally:
            connection.close()

    def _failed(self, count: int, why: str) -> SpanExportResult:
        level = logging.DEBUG if self._failing else logging.WARNING
        log.log(level, "OTLP export of %d span(s) to %s failed (%s); they are dropped", count, self.url, why)
        self._failing = True
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._shut_down = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:  # noqa: ARG002  (nothing held here)
        return True
