"""aiohttp's low-level server for the HTTP front end (:mod:`.http`): connections counted per client address,
a request waiting for room in the request buffer budget told when its connection is gone, and a request
with both ``Transfer-Encoding: chunked`` and ``Content-Length`` refused in words that say so."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from sonic.server.budget import BudgetHold

# aiohttp's parser's words for a request with both framings: its C parser's (llhttp), its Python one's.
_BOTH_FRAMINGS = (
    "Content-Length can't be present with Transfer-Encoding",
    "Transfer-Encoding can't be present with Content-Length",
)
BOTH_FRAMINGS_MESSAGE = (
    "the request has both 'Transfer-Encoding: chunked' and 'Content-Length', which disagree on where its "
    "body ends; this server refuses such a request (a request-smuggling risk, RFC 9112 section 6.1; "
    "Triton serves it): send only one of them"
)


class _Connection(web.RequestHandler):
    """aiohttp's connection handler; a request with both framings gets the 400 aiohttp gives it (the
    connection is closed after), with a JSON body that says why, as every other error of the front end."""

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not (
            status == 400
            and isinstance(exc, HttpProcessingError)
            and any(words in str(exc.message) for words in _BOTH_FRAMINGS)
        ):
            return super().handle_error(request, status, exc, message)
        response = web.Response(
            status=400,
            body=json.dumps({"error": BOTH_FRAMINGS_MESSAGE}, separators=(",", ":")).encode(),
            content_type="application/json",
        )
        response.force_close()
        return response


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

    def __call__(self) -> web.RequestHandler:
        # aiohttp's own ``__call__``, with the handler above (aiohttp keeps the keyword arguments given).
        return _Connection(self, loop=self._loop, **self._kwargs)

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
