"""``GET /metrics`` on its own port, as Triton serves it (plain HTTP, no token: bind it privately)."""

from __future__ import annotations

from aiohttp import web

from sonic.server.budget import RequestBudget
from sonic.server.frontends.aiohttp_listener import AiohttpListener
from sonic.server.frontends.base import Frontend
from sonic.server.metrics.prometheus import Metrics
from sonic.server.models.manager import ModelManager

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsFrontend(Frontend):
    name = "metrics"
    carries_requests = False

    def __init__(
        self, models: ModelManager, host: str, port: int, budget: RequestBudget | None = None
    ) -> None:
        self._metrics = Metrics(models, budget)
        self.host = host
        self.port = port
        self._listener = AiohttpListener()

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path != "/metrics" or request.method != "GET":
            return web.Response(status=404, text="metrics are at GET /metrics\n")
        return web.Response(body=self._metrics.render().encode(), headers={"Content-Type": CONTENT_TYPE})

    async def start(self) -> None:
        server = web.Server(self._handle, access_log=None)
        self.port = await self._listener.start(server, self.host, self.port, None)

    async def stop(self, grace_s: float) -> None:
        await self._listener.stop(grace_s)
        self._metrics.close()
