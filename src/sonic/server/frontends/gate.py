"""What every front end does to every call, whatever its protocol: admit it, read its trace context, map its failure.

The front ends only say where the inputs are in their protocol (the ``authorization`` header or metadata, the
peer, how to look a header up); the policy is here, once: the guard's checks (skipped entirely when no guard is
configured, so a plain server pays nothing), W3C trace headers (read only while spans are made), and failures
mapped through the one status table of :mod:`sonic.protocol.errors`, unexpected exceptions logged and reported as INTERNAL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from urllib.parse import unquote

from sonic.protocol.errors import InternalError, SonicError
from sonic.server.dataplane import DataPlane
from sonic.server.guard import CallKind, Guard
from sonic.server.observe import TRACE_HEADERS

log = logging.getLogger(__name__)

GRPC_HEALTH_METHODS = frozenset({"ServerLive", "ServerReady", "ModelReady", "HealthCheck"})


def grpc_call_kind(method: str) -> CallKind:
    """What the guard calls a gRPC method (``ModelInfer``, ``HealthCheck``, ...)."""
    if method in GRPC_HEALTH_METHODS:
        return CallKind.HEALTH
    if method == "RepositoryIndex":
        return CallKind.INDEX
    if method in {"ModelInfer", "ModelStreamInfer"}:
        return CallKind.INFER
    return CallKind.CONTROL


def peer_host(peer: str) -> str:
    """The host of a gRPC peer (``ipv4:1.2.3.4:5``, ``ipv6:%5B::1%5D:5``) as HTTP's peername spells it."""
    scheme, _, rest = peer.partition(":")
    if scheme not in {"ipv4", "ipv6"}:
        return peer
    return unquote(rest).rsplit(":", 1)[0].strip("[]")


def as_sonic_error(exc: BaseException) -> SonicError:
    """``exc`` as the error the client is told: ours as they are, anything else logged and INTERNAL."""
    if isinstance(exc, SonicError):
        return exc
    log.exception("unexpected error", exc_info=exc)
    return InternalError(f"internal error: {exc!r}")


class CallGate:
    """One per server, shared by its front ends."""

    __slots__ = ("_dataplane", "guard")

    def __init__(self, dataplane: DataPlane, guard: Guard | None) -> None:
        self._dataplane = dataplane
        self.guard = guard  # None: nothing to check; front ends skip gathering the check's inputs

    def admit(self, kind: CallKind, authorization: str | None, client: str, address: str) -> None:
        """Raise the error that refuses the call, if any: ``client`` is its connection, ``address`` its host."""
        if self.guard is not None:
            self.guard.check(kind, authorization, client, address)

    def admit_grpc(self, method: str, authorization: str | None, peer: str) -> None:
        """:meth:`admit` for a gRPC call to ``method`` from ``peer`` as gRPC spells it."""
        if self.guard is not None:
            self.guard.check(grpc_call_kind(method), authorization, peer, peer_host(peer))

    def trace_context(self, header: Callable[[str], str | None]) -> dict[str, str] | None:
        """The call's W3C trace headers (``header`` looks one up by its lower-case name), while spans are made."""
        if not self._dataplane.wants_trace_context:
            return None
        return {name: value for name in TRACE_HEADERS if (value := header(name)) is not None}
