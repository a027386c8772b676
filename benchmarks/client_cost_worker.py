"""The client side of ``benchmarks/client_cost.py``: run by that script with one tree's ``src`` on
``PYTHONPATH``; prints the client process's CPU µs per request of each round as JSON.

Usage (by client_cost.py): ``python benchmarks/client_cost_worker.py ADDRESS ROUNDS REQUESTS [CONCURRENCY]``
(32 in flight unless told).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import numpy as np

CONCURRENCY = 32
WARMUP_CALLS = 200


async def measure(address: str, rounds: int, requests: int, concurrency: int = CONCURRENCY) -> list[float]:
    from sonic.client import AsyncClient, ClientConfig, SharedMemoryMode  # noqa: PLC0415  (the tree's own)

    config = ClientConfig(servers=(address,), shared_memory=SharedMemoryMode.OFF, max_in_flight=concurrency)
    x = np.ones((1, 16), np.float32)
    per_round = []
    async with AsyncClient("identity", config) as client:
        for _ in range(WARMUP_CALLS):
            await client.infer({"INPUT0": x})
        for _ in range(rounds):
            left = requests

            async def caller() -> None:
                nonlocal left
                while left > 0:
                    left -= 1
                    await client.infer({"INPUT0": x})

            cpu = time.process_time()
            await asyncio.gather(*(caller() for _ in range(concurrency)))
            per_round.append(1e6 * (time.process_time() - cpu) / requests)
    return per_round


if __name__ == "__main__":
    address, rounds, requests = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else CONCURRENCY
    print(json.dumps(asyncio.run(measure(address, rounds, requests, concurrency))))
