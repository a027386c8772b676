"""One client of ``benchmarks/client_vs_tritonclient.py`` in its own process: prints, as JSON, each
round's requests per second and client CPU µs per request.

Usage (by that script): ``python benchmarks/client_vs_tritonclient_worker.py KIND ADDRESS ROUNDS
REQUESTS`` with KIND one of ``sonic-async``, ``triton-async`` (32 callers), ``sonic-sync``,
``triton-sync`` (one caller). Every call does a user's whole job: numpy in, numpy out (tritonclient's
``InferInput`` is made per call, as its users do). ``sonic`` is the tree on ``PYTHONPATH``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

CONCURRENCY = 32
WARMUP_CALLS = 300
MODEL = "identity"
Round = tuple[float, float]  # requests per second, client CPU µs per request


def _round(requests: int, wall_s: float, cpu_s: float) -> Round:
    return requests / wall_s, 1e6 * cpu_s / requests


async def _async_rounds(call: Callable[[], Awaitable[Any]], rounds: int, requests: int) -> list[Round]:
    for _ in range(WARMUP_CALLS):
        await call()
    measured = []
    for _ in range(rounds):
        left = requests

        async def caller() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await call()

        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(caller() for _ in range(CONCURRENCY)))
        measured.append(_round(requests, time.perf_counter() - wall, time.process_time() - cpu))
    return measured


def _sync_rounds(call: Callable[[], Any], rounds: int, requests: int) -> list[Round]:
    for _ in range(WARMUP_CALLS):
        call()
    measured = []
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(requests):
            call()
        measured.append(_round(requests, time.perf_counter() - wall, time.process_time() - cpu))
    return measured


async def sonic_async(address: str, rounds: int, requests: int) -> list[Round]:
    from sonic.client import AsyncClient, ClientConfig, SharedMemoryMode  # noqa: PLC0415  (the tree's own)

    config = ClientConfig(servers=(address,), shared_memory=SharedMemoryMode.OFF, max_in_flight=CONCURRENCY)
    x = np.ones((1, 16), np.float32)
    async with AsyncClient(MODEL, config) as client:

        async def call() -> Any:
            return (await client.infer({"INPUT0": x}))["OUTPUT0"]

        return await _async_rounds(call, rounds, requests)


async def triton_async(address: str, rounds: int, requests: int) -> list[Round]:
    from tritonclient.grpc.aio import InferenceServerClient, InferInput  # noqa: PLC0415

    x = np.ones((1, 16), np.float32)
    client = InferenceServerClient(url=address)
    try:

        async def call() -> Any:
            tensor = InferInput("INPUT0", [1, 16], "FP32")
            tensor.set_data_from_numpy(x)
            return (await client.infer(MODEL, [tensor])).as_numpy("OUTPUT0")

        return await _async_rounds(call, rounds, requests)
    finally:
        await client.close()


def sonic_sync(address: str, rounds: int, requests: int) -> list[Round]:
    from sonic.client import ClientConfig, SharedMemoryMode, SyncClient  # noqa: PLC0415  (the tree's own)

    config = ClientConfig(servers=(address,), shared_memory=SharedMemoryMode.OFF)
    x = np.ones((1, 16), np.float32)
    with SyncClient(MODEL, config) as client:
        return _sync_rounds(lambda: client.infer({"INPUT0": x})["OUTPUT0"], rounds, requests)


def triton_sync(address: str, rounds: int, requests: int) -> list[Round]:
    from tritonclient.grpc import InferenceServerClient, InferInput  # noqa: PLC0415

    x = np.ones((1, 16), np.float32)
    client = InferenceServerClient(url=address)

    def call() -> Any:
        tensor = InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(x)
        return client.infer(MODEL, [tensor]).as_numpy("OUTPUT0")

    try:
        return _sync_rounds(call, rounds, requests)
    finally:
        client.close()


def main(kind: str, address: str, rounds: int, requests: int) -> list[Round]:
    if kind == "sonic-async":
        return asyncio.run(sonic_async(address, rounds, requests))
    if kind == "triton-async":
        return asyncio.run(triton_async(address, rounds, requests))
    if kind == "sonic-sync":
        return sonic_sync(address, rounds, requests)
    if kind == "triton-sync":
        return triton_sync(address, rounds, requests)
    raise SystemExit(
        f"unknown client kind {kind!r}: expected sonic-async, triton-async, sonic-sync or triton-sync"
    )


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
