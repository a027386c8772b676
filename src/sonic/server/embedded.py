"""The server's models in this process, without sockets: the entry point of ``sonic.workflow``'s direct mode.

Configuration completion, validation, dynamic batching and backends are those of ``sonic serve``;
tensors stay numpy arrays (nothing is serialized), and statistics are the server's own
``ModelStatistics`` answer. Models load on first use; every method runs on one event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy.typing as npt
from tritonclient.grpc import service_pb2

from sonic.server.backends.base import ModelCall
from sonic.server.calls.caller import ServerModelCaller
from sonic.server.config import BackendOptions, ServerConfig
from sonic.server.models.manager import ModelManager


class EmbeddedModels:
    def __init__(
        self, repositories: Sequence[Path], *, backend_options: BackendOptions | None = None
    ) -> None:
        config = ServerConfig(
            model_repositories=tuple(repositories), backend_options=backend_options or BackendOptions()
        )
        self._manager = ModelManager(config)
        self._loading: dict[str, asyncio.Task[None]] = {}

    async def load(self, model: str) -> None:
        """Load ``model`` unless it is loaded or loading; concurrent callers share one load."""
        task = self._loading.get(model)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._manager.load(model))
            self._loading[model] = task
        await task

    async def infer(
        self, model: str, inputs: Mapping[str, npt.NDArray[Any]], outputs: Sequence[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        await self.load(model)
        caller = ServerModelCaller(self._manager.get, asyncio.get_running_loop())
        return await caller.infer(ModelCall(model, "", inputs, outputs))

    async def statistics(self, model: str) -> service_pb2.ModelStatisticsResponse:
        """Every ready version's statistics, as the server's ModelStatistics call answers."""
        await self.load(model)
        response = service_pb2.ModelStatisticsResponse()
        for version in self._manager.ready_versions(model):
            response.model_stats.append(version.stats.to_proto(version.name, version.version))
        return response

    async def close(self) -> None:
        """Cancel loads still running, then unload every model."""
        for task in self._loading.values():
            if not task.done():
                task.cancel()
        await asyncio.gather(*self._loading.values(), return_exceptions=True)
        await self._manager.close()
