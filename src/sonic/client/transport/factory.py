"""The one place a transport is chosen and built: used by :class:`sonic.client.AsyncClient`,
``sonic perf`` and :mod:`sonic.workflow`.

A new transport is a :class:`~sonic.client.transport.control.GrpcCalls` subclass (or a
:class:`~sonic.client.transport.base.Transport` for another protocol), a
:class:`~sonic.client.config.TransportKind` member and one branch here.
"""

from __future__ import annotations

from typing import Any

from sonic.client.config import ClientConfig, TransportKind
from sonic.client.transport.control import GrpcCalls


def open_transport(address: str, config: ClientConfig) -> GrpcCalls:
    """A transport to the server at ``address``, as ``config`` says (kind, TLS, token, timeouts).

    Nothing is connected yet: the first call connects.
    """
    common: dict[str, Any] = {
        "compression": config.compression,
        "tls": config.tls,
        "token": config.token,
        "default_timeout_s": config.timeout_s,
        "control_timeout_s": config.control_timeout_s,
    }
    if config.transport is TransportKind.H2:
        from sonic.client.transport.h2 import H2Transport  # noqa: PLC0415  (protobuf only when used)

        return H2Transport(
            address,
            keepalive_interval_s=config.keepalive_s,
            keepalive_timeout_s=config.keepalive_timeout_s,
            **common,
        )
    from sonic.client.transport.grpc import GrpcTransport  # noqa: PLC0415  (grpc only when used)

    return GrpcTransport(
        address,
        stream_max_bytes=config.stream_max_bytes,
        keepalive_s=config.keepalive_s,
        keepalive_timeout_s=config.keepalive_timeout_s,
        reconnect_backoff_s=(config.probe_backoff_s, config.probe_backoff_max_s),
        **common,
    )
