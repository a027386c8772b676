"""aiohttp's low-level server for the HTTP front end (:mod:`.http`): connections counted per client address,
and a request waiting for room in the request buffer budget told when its connection is gone."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sonic.server.budget import BudgetHold


class ClientCountingServer(web.Server):
    """aiohttp's low-level server, counting open connections per client address, and telling a request
    that waits for room in the request buffer budget that its connection is gone (aiohttp does not
    cancel handlers): at shutdown, or a close seen while reading. A connection paused for lack of room
    is not read, so its client's close is seen only when the wait ends (its bound, or room).

    Connections over ``max_per_client`` are accepted but every request on them is answered 429 and
    the connection closed, so the client learns why instead of seeing a reset.
    """

    def __init__(self, handler: Any, *, max_per_client: int | None, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._max_per_client = max_per_client
        self._open: dict[str, int] = {}
        self._hosts: dict[object, str] = {}
        self.refused: set[object] = set()  # transports over the limit
        self.holds: dict[object, BudgetHold] = {}  # by connection (aiohttp's handler), its request's

    def connection_made(self, handler: Any, transport: Any) -> None:
        super().connection_made(handler, transport)
        if self._max_per_client is None:
            return
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if peer else "unknown"
        self._hosts[transport] = host
        self._open[host] = self._open.get(host, 0) + 1
        if self._open[host] > self._max_per_client:
            self.refused.add(transport)

    def connection_lost(self, handler: Any, exc: BaseException | None = None) -> None:
        hold = self.holds.pop(handler, None)
        if hold is not None:
            hold.abandon()
        transport = handler.transport
        host = self._hosts.pop(transport, None)
        if host is not None:
            self.refused.discard(transport)
            self._open[host] -= 1
            if not self._open[host]:
                del self._open[host]
        super().connection_lost(handler, exc)
