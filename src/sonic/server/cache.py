"""Response cache for deterministic models (``response_cache { enable: true }`` in config.pbtxt).

One server-wide LRU bounded by ``cache_size_bytes`` (Triton's local cache). The key is a BLAKE2b
digest of the model, version, requested outputs and every input's name, datatype, shape and bytes;
the value is a private copy of the output arrays. Hits and misses are recorded as Triton reports
them: ``cache_hit`` / ``cache_miss`` in ModelStatistics, and hits count as successful requests but
not as inferences or executions.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.protocol import dtypes
from sonic.protocol.types import InferRequest, InferResponse, OutputTensor
from sonic.server.models.version import ModelVersion
from sonic.server.shm.request import RequestMemory
from sonic.server.trace.requests import RequestTrace

_SEPARATOR = b"\x00"


class ResponseCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used_bytes = 0
        self._entries: OrderedDict[bytes, tuple[list[OutputTensor], int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(model: ModelVersion, request: InferRequest, memory: RequestMemory | None = None) -> bytes:
        """Over the inputs' bytes as received, or as read from shared memory (``memory``)."""
        digest = hashlib.blake2b(digest_size=32)
        digest.update(f"{model.name}\x00{model.version}\x00".encode())
        if request.outputs is not None:
            digest.update(",".join(request.outputs).encode())
        for index, tensor in sorted(enumerate(request.inputs), key=lambda t: t[1].name):
            digest.update(_SEPARATOR)
            digest.update(f"{tensor.name}\x00{tensor.datatype}\x00{tensor.shape}\x00".encode())
            raw = tensor.raw if tensor.shm is None or memory is None else memory.inputs[index]
            if raw is not None:
                digest.update(raw)
            elif tensor.array is not None:
                digest.update(dtypes.array_to_bytes(tensor.array, dtypes.from_name(tensor.datatype)))
        return digest.digest()

    def get(self, key: bytes) -> list[OutputTensor] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: bytes, outputs: list[OutputTensor]) -> None:
        # Private copies: the arrays a model returns may be views of a whole batch's output.
        stored = [OutputTensor(o.name, o.datatype, o.shape, _owned(o.array)) for o in outputs]
        size = sum(o.array.nbytes for o in stored) + len(key)
        if size > self.max_bytes:
            return
        previous = self._entries.pop(key, None)
        if previous is not None:
            self.used_bytes -= previous[1]
        while self.used_bytes + size > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.used_bytes -= evicted
        self._entries[key] = (stored, size)
        self.used_bytes += size


def _owned(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    copy = np.array(array, copy=True)
    copy.flags.writeable = False  # shared by every later hit
    return copy


async def infer_through_cache(
    cache: ResponseCache,
    model: ModelVersion,
    request: InferRequest,
    received_ns: int = 0,
    memory: RequestMemory | None = None,
    trace: RequestTrace | None = None,
) -> InferResponse:
    started = time.perf_counter_ns()
    received = received_ns or started
    key = cache.key(model, request, memory)
    outputs = cache.get(key)
    stats = model.stats
    if outputs is not None:
        now = time.perf_counter_ns()
        stats.cache_hit.add(now - started)
        stats.success.add(now - received)
        stats.last_inference_ms = time.time_ns() // 1_000_000
        return InferResponse(model.name, str(model.version), request.request_id, list(outputs))
    lookup_ns = time.perf_counter_ns() - started
    response = await model.infer(request, received_ns, memory, trace)
    inserted = time.perf_counter_ns()
    cache.put(key, response.outputs)
    stats.cache_miss.add(lookup_ns + time.perf_counter_ns() - inserted)
    return response
