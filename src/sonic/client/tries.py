"""One try of one request on one server: shared-memory placement, the wire request, the answer.

:class:`AsyncClient` picks the server and retries; a :class:`Tries` sends one attempt to the server
it was given. For a server on this host it puts the inputs and outputs into a registered region of
that server's pool (:mod:`sonic.client.shm`) when the request is large enough to gain from it, and
hands the region back, or drops it after an error (the server may hold a stale view of it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy.typing as npt

from sonic.client.batching import Parameters
from sonic.client.config import ClientConfig, SharedMemoryMode
from sonic.client.errors import ClientError, TransientError
from sonic.client.plans import CallPlan
from sonic.client.registry import ServerEntry
from sonic.client.results import Arrays, decode_outputs, output_bytes
from sonic.client.shm import Region, RegionPool, layout
from sonic.client.transport.base import ModelInfo, ServerTiming
from sonic.protocol.types import ShmRef, WireInput, WireOutputRequest, WireRequest

log = logging.getLogger("sonic.client.client")  # the client's logger: its users filter on that name
# One try's answer: outputs, serialize/wait/deserialize seconds, verbose mode's server timing, the server.
# Plain values: the caller makes the one CallTiming (a frozen dataclass costs a setattr per field).
Answer = tuple[Arrays, float, float, float, ServerTiming | None, str]


class Tries:
    """How one client's attempts reach a server: its model, version and configuration."""

    def __init__(self, model: str, version: str, config: ClientConfig) -> None:
        self._model = model
        self._version = version
        self._config = config

    def use_shm(self, entry: ServerEntry) -> bool:
        return (
            self._config.shared_memory is not SharedMemoryMode.OFF
            and entry.transport.is_local
            and not entry.shm_refused
        )

    async def region(self, entry: ServerEntry, size: int) -> Region | None:
        """A registered region, or None when this server cannot use shared memory."""
        if entry.shm is None:
            entry.shm = RegionPool(entry.transport)
        try:
            return await entry.shm.acquire(size)
        except TransientError:
            raise
        except (ClientError, OSError) as exc:
            entry.shm_refused = True
            level = logging.WARNING if self._config.shared_memory is SharedMemoryMode.SYSTEM else logging.INFO
            log.log(level, "shared memory with %s not possible, using plain gRPC: %s", entry.address, exc)
            return None

    async def call(
        self,
        entry: ServerEntry,
        info: ModelInfo,
        encoded: dict[str, tuple[npt.NDArray[Any], str, bytes | memoryview]],  # array, datatype, bytes
        names: list[str],
        request_id: str,
        parameters: Parameters,
        class_counts: Mapping[str, int] | None = None,
    ) -> Answer:
        """``class_counts``: outputs asked as their top k classes (never placed in shared memory)."""
        classes = class_counts or {}
        batch = next(iter(encoded.values()))[0].shape[0] if info.max_batch_size > 0 else 1
        region: Region | None = None
        placements: dict[str, ShmRef] = {}
        out_placements: dict[str, ShmRef] = {}
        shm_ns = 0
        if self.use_shm(entry):
            out_sizes = {
                n: s for n, s in (output_bytes(info, names, batch) or {}).items() if n not in classes
            }
            in_sizes = {
                n: (d.nbytes if isinstance(d, memoryview) else len(d)) for n, (_, _, d) in encoded.items()
            }
            total = layout("", out_sizes, layout("", in_sizes)[1])[1]
            # Below the threshold the copy into the region costs more than the bytes it keeps off the socket.
            region = await self.region(entry, total) if total >= self._config.shm_min_bytes else None
            if region is not None:
                start = time.perf_counter_ns()
                placements, end = layout(region.name, in_sizes)
                out_placements, _ = layout(region.name, out_sizes, end)
                for name, (_, _, data) in encoded.items():
                    region.write(placements[name].offset, data)
                shm_ns = time.perf_counter_ns() - start
        request = WireRequest(
            model=self._model,
            version=self._version,
            inputs=tuple(
                WireInput(n, datatype, tuple(a.shape), None if n in placements else d, placements.get(n))
                for n, (a, datatype, d) in encoded.items()
            ),
            outputs=tuple(WireOutputRequest(n, out_placements.get(n), classes.get(n, 0)) for n in names),
            request_id=request_id,
            timeout_s=self._config.timeout_s,
            parameters=parameters,
        )
        try:
            before = (
                await entry.transport.model_statistics(self._model, self._version)
                if self._config.verbose
                else None
            )
            response = await entry.transport.infer(request)
            server = None
            if before is not None:
                server = await entry.transport.model_statistics(self._model, self._version) - before
            start = time.perf_counter_ns()
            outputs = decode_outputs(self._model, response, names, region, out_placements)
            decode_ns = time.perf_counter_ns() - start
        except BaseException:
            if region is not None and entry.shm is not None:
                await entry.shm.discard(region)  # the server may hold a stale view of it
            raise
        if region is not None and entry.shm is not None:
            entry.shm.release(region)
        serialize_s = (response.serialize_ns + shm_ns) / 1e9
        return outputs, serialize_s, response.wait_ns / 1e9, decode_ns / 1e9, server, entry.address

    async def call_planned(
        self,
        entry: ServerEntry,
        info: ModelInfo,
        plan: CallPlan,
        arrays: Arrays,
        data: list[bytes | memoryview],
        request_id: str,
    ) -> Arrays:
        """A planned call (:mod:`sonic.client.plans`) that may use shared memory: :meth:`call`'s outputs."""
        encoded = {
            n: (a, datatype, d)
            for (n, a), (_, datatype, _), d in zip(arrays.items(), plan.template.inputs, data, strict=True)
        }
        answer = await self.call(entry, info, encoded, plan.names, request_id, {})
        return answer[0]
