"""The interface every front end has: start listening, say where, stop in order.

The server starts its front ends one after the other, prints their addresses in the one ready line
(``sonic: ready grpc=H:P [http=H:P] [metrics=H:P]``, each field ``name=address``), and on SIGTERM
stops them as uvicorn does: intake stops at once, calls in flight get ``grace_s`` to finish, and
what is left is cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sonic.server.config import MAX_GRPC_DECOMPRESSED_BYTES, ServerConfig, TlsConfig
from sonic.server.header_forward import NO_FORWARD, HeaderForward


def host_port(host: str, port: int) -> str:
    """``HOST:PORT``, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class FrontendSettings:
    """What the request-carrying front ends (gRPC, HTTP/REST) are configured with, taken once from the
    server's configuration; each front end reads the fields that apply to it."""

    host: str
    max_message_bytes: int  # largest gRPC message / HTTP body, as received (and inflated)
    tls: TlsConfig | None = None
    max_decompressed_bytes: int = MAX_GRPC_DECOMPRESSED_BYTES  # a compressed body, once inflated
    max_concurrent_streams: int | None = None  # gRPC, per connection; None: the stack's own
    max_connections_per_client: int | None = None  # HTTP, open connections per client address
    grpc_header_forward: HeaderForward = NO_FORWARD  # gRPC headers that become request parameters
    http_header_forward: HeaderForward = NO_FORWARD  # HTTP headers that become request parameters

    @classmethod
    def from_config(cls, config: ServerConfig) -> FrontendSettings:
        return cls(
            host=config.host,
            max_message_bytes=config.max_message_bytes,
            tls=config.security.tls,
            max_decompressed_bytes=config.grpc.max_decompressed_bytes,
            max_concurrent_streams=config.grpc.max_concurrent_streams,
            max_connections_per_client=config.http.max_connections_per_client,
            grpc_header_forward=HeaderForward.compile(
                config.grpc.header_forward_pattern, "--grpc-header-forward-pattern"
            ),
            http_header_forward=HeaderForward.compile(
                config.http.header_forward_pattern, "--http-header-forward-pattern"
            ),
        )


class Frontend(Protocol):
    """One listening endpoint of the server (gRPC, HTTP/REST, metrics)."""

    name: str  # its field in the ready line
    host: str
    port: int  # as bound: the configured one, or the one picked for port 0 (known after start)
    # Whether it carries requests that must drain at shutdown; the others (metrics) stop after the drain,
    # so the drain itself can be watched.
    carries_requests: bool

    async def start(self) -> None:
        """Bind and listen; raises ``OSError`` when the address cannot be bound."""

    async def stop(self, grace_s: float) -> None:
        """Refuse new connections and calls at once; calls in flight get ``grace_s``; cancel the rest."""

    @property
    def address(self) -> str:
        """Where it listens, as ``HOST:PORT``: the value of its ready-line field."""
        return host_port(self.host, self.port)
