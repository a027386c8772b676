"""An aiohttp low-level server on one address, stopped in the front ends' order (the HTTP and metrics front ends)."""

from __future__ import annotations

import ssl

from aiohttp import web


class _Runner(web.ServerRunner):
    """aiohttp's runner, with the drain time given when stopping (aiohttp's own takes it when constructed)."""

    __slots__ = ("grace_s",)

    def __init__(self, server: web.Server) -> None:
        super().__init__(server)
        self.grace_s = 0.0

    async def shutdown(self) -> None:
        # aiohttp's hook between closing the listening sockets and closing the connections: requests in
        # flight get grace_s, then are cancelled; the runner's own wait then finds no connection left.
        if self.server is not None:
            await self.server.shutdown(self.grace_s)


class AiohttpListener:
    def __init__(self) -> None:
        self._runner: _Runner | None = None

    async def start(
        self, server: web.Server, host: str, port: int, ssl_context: ssl.SSLContext | None
    ) -> int:
        """Listen on ``host:port``; returns the bound port."""
        self._runner = _Runner(server)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port, ssl_context=ssl_context, reuse_port=False).start()
        return int(self._runner.addresses[0][1])

    async def stop(self, grace_s: float) -> None:
        """Stop listening, let requests in flight finish for up to ``grace_s``, close the connections."""
        if self._runner is not None:
            self._runner.grace_s = grace_s
            await self._runner.cleanup()
