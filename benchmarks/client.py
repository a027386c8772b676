"""Client benchmark: sonic.client vs tritonclient.grpc.aio against the same server, in one run.

- small requests: identity FP32 [1, 16] at concurrency 32: requests/s and client CPU s per request;
- large requests: 1693 x 48 x 48 x 1 FP32 (15.6 MB, an EmTrkMichelId batch) through an identity model:
  MB/s of request tensor moved (the response carries as much back), over gRPC and with shared memory.

Usage: ./dev bench client [--server sonic|triton] [--seconds 5] [--out benchmarks/results/client.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc.aio as triton_aio
from tritonclient.grpc import InferInput

from sonic.client import AsyncClient, ClientConfig, SharedMemoryMode
from sonic.launch import ServerProcess
from sonic.testing.repository import MODELS, write_test_repository
from sonic.testing.triton import TritonProcess

CONCURRENCY = 32
LARGE_SHAPE = (1693, 48, 48, 1)


async def _measure(call: Callable[[], Awaitable[Any]], concurrency: int, seconds: float) -> dict[str, float]:
    """Run ``call`` from ``concurrency`` workers for ``seconds``; wall time, CPU time and count."""
    for _ in range(3):
        await call()  # warm-up: connections, metadata, first allocations
    count = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            await call()
            count += 1

    cpu = time.process_time()
    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    return {"requests": count, "wall_s": wall, "requests_per_s": count / wall, "cpu_s_per_request": cpu / count}


async def _tritonclient_call(client: triton_aio.InferenceServerClient, model: str, x: np.ndarray) -> Any:
    tensor = InferInput("INPUT0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = await client.infer(model, [tensor])
    return result.as_numpy("OUTPUT0")


async def run(address: str, seconds: float) -> dict[str, Any]:
    small = np.ones((1, 16), np.float32)
    large = np.random.default_rng(0).standard_normal(LARGE_SHAPE).astype(np.float32)
    results: dict[str, Any] = {}
    plain = ClientConfig(servers=(address,), shared_memory=SharedMemoryMode.OFF, max_in_flight=CONCURRENCY)
    shm = ClientConfig(servers=(address,), shared_memory=SharedMemoryMode.SYSTEM, max_in_flight=CONCURRENCY)
    triton = triton_aio.InferenceServerClient(address)
    try:
        async with AsyncClient("identity", plain) as client:
            results["small_sonic"] = await _measure(lambda: client.infer({"INPUT0": small}), CONCURRENCY, seconds)
        results["small_tritonclient"] = await _measure(
            lambda: _tritonclient_call(triton, "identity", small), CONCURRENCY, seconds
        )
        for name, config in (("large_sonic_grpc", plain), ("large_sonic_shm", shm)):
            async with AsyncClient("identity_large", config) as client:
                timing: list[Any] = []

                async def call(c: AsyncClient = client, t: list[Any] = timing) -> None:
                    result = await c.infer_detailed({"INPUT0": large})
                    t.append(result.timing)

                results[name] = await _measure(call, 1, seconds)
                n = len(timing)
                results[name]["client_split_s"] = {
                    "serialize": sum(t.serialize_s for t in timing) / n,
                    "wait": sum(t.wait_s for t in timing) / n,
                    "deserialize": sum(t.deserialize_s for t in timing) / n,
                }
        results["large_tritonclient"] = await _measure(
            lambda: _tritonclient_call(triton, "identity_large", large), 1, seconds
        )
    finally:
        await triton.close()
    for key, value in results.items():
        if key.startswith("large"):
            value["MB_per_s"] = large.nbytes / 1e6 * value["requests_per_s"]
    results["speedup_small_requests_per_s"] = (
        results["small_sonic"]["requests_per_s"] / results["small_tritonclient"]["requests_per_s"]
    )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=["sonic", "triton"], default="sonic")
    parser.add_argument("--seconds", type=float, default=5.0, help="measurement time per case")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/client.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sonic-bench-") as tmp:
        repo = write_test_repository(Path(tmp) / "repo", args.server)
        if args.server == "sonic":
            server_cm: Any = ServerProcess.start([repo])
        else:
            server_cm = TritonProcess.start([repo], models=[m.name for m in MODELS], workdir=Path(tmp))
        with server_cm as server:
            results = asyncio.run(run(server.grpc_address, args.seconds))
    report = {
        "server": args.server,
        "machine": {"cpus": platform.machine(), "python": platform.python_version()},
        "concurrency_small": CONCURRENCY,
        "large_shape": LARGE_SHAPE,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
