"""Client benchmark: sonic.client vs tritonclient.grpc.aio against the same server, in one run.

- small requests: identity FP32 [1, 16] at concurrency 32: requests/s and client CPU s per request,
  one request per call, and with client-side coalescing (``coalesce_in_flight=2``); and without the
  resilience defaults (no HTTP/2 keepalive, no deadline) to show what they cost;
- large requests: 1693 x 48 x 48 x 1 FP32 (15.6 MB, an EmTrkMichelId batch) through an identity model:
  MB/s of request tensor moved (the response carries as much back), over gRPC, with shared memory, and
  with zero-copy shared memory (``shm_request``: each call fills the input view from the caller's
  array, which stands in for producing the data in place, and takes the output as a view).

Usage: ./dev bench client [--server sonic|triton] [--seconds 3] [--rounds 3] [--large-only|--small-only]
       [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import tritonclient.grpc.aio as triton_aio
from tritonclient.grpc import InferInput

from benchmarks.harness.load import closed_loop
from benchmarks.harness.processes import steady_malloc
from sonic.client import AsyncClient, CallTiming, ClientConfig, SharedMemoryMode, ShmRequest
from sonic.launch import ServerProcess
from sonic.launch.triton import TritonProcess
from sonic.testing.repository import MODELS, write_test_repository

CONCURRENCY = 32
LARGE_SHAPE = (1693, 48, 48, 1)


async def _measure(call: Callable[[], Awaitable[Any]], concurrency: int, seconds: float) -> dict[str, float]:
    """Run ``call`` from ``concurrency`` workers for ``seconds``; wall time, CPU time and count."""
    for _ in range(3):
        await call()  # warm-up: connections, metadata, first allocations
    cpu = time.process_time()
    count, wall = await closed_loop(call, concurrency, seconds)
    cpu = time.process_time() - cpu
    return {
        "requests": count,
        "wall_s": wall,
        "requests_per_s": count / wall,
        "cpu_s_per_request": cpu / count,
    }


async def _tritonclient_call(
    client: triton_aio.InferenceServerClient, model: str, x: npt.NDArray[Any]
) -> Any:
    tensor = InferInput("INPUT0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = await client.infer(model, [tensor])
    return result.as_numpy("OUTPUT0")


async def _zero_copy_call(request: ShmRequest, x: npt.NDArray[Any], timings: list[CallTiming]) -> None:
    """Fill the input in place, infer, take the output view: the split is fill / infer / 0 (no decode)."""
    start = time.perf_counter()
    np.copyto(request.inputs["INPUT0"], x)
    filled = time.perf_counter()
    outputs = await request.infer()
    done = time.perf_counter()
    assert outputs["OUTPUT0"].shape == x.shape
    timings.append(CallTiming(filled - start, done - filled, time.perf_counter() - done))


async def _borrowing_call(client: AsyncClient, x: npt.NDArray[Any], timings: list[CallTiming]) -> None:
    """As the docs show it: borrow a region per call, fill it, infer, release."""
    async with await client.shm_request({"INPUT0": x.shape}) as request:
        await _zero_copy_call(request, x, timings)


async def run(
    address: str, seconds: float, rounds: int, *, large_only: bool = False, small_only: bool = False
) -> dict[str, Any]:
    """Every case once per round, rounds interleaved, so load from other processes hits all alike."""
    small = np.ones((1, 16), np.float32)
    large = np.random.default_rng(0).standard_normal(LARGE_SHAPE).astype(np.float32)

    def config(shared_memory: SharedMemoryMode, **more: Any) -> ClientConfig:
        return ClientConfig(
            servers=(address,), shared_memory=shared_memory, max_in_flight=CONCURRENCY, **more
        )

    plain = config(SharedMemoryMode.OFF)
    shm = config(SharedMemoryMode.SYSTEM)
    triton = triton_aio.InferenceServerClient(address)
    small_client = AsyncClient("identity", plain)
    small_merged = AsyncClient("identity", config(SharedMemoryMode.OFF, coalesce_in_flight=2))
    small_bare = AsyncClient("identity", config(SharedMemoryMode.OFF, keepalive_s=None, timeout_s=None))
    large_plain = AsyncClient("identity_large", plain)
    large_shm = AsyncClient("identity_large", shm)
    large_zero_copy = AsyncClient("identity_large", shm)
    held = await large_zero_copy.shm_request({"INPUT0": LARGE_SHAPE})  # one region for the whole run
    splits: dict[str, list[Any]] = {
        "large_sonic_grpc": [],
        "large_sonic_shm": [],
        "large_sonic_shm_2_in_flight": [],
        "large_sonic_shm_zero_copy": [],
        "large_sonic_shm_zero_copy_borrowing": [],
    }

    async def large_call(client: AsyncClient, timings: list[Any]) -> None:
        result = await client.infer_detailed({"INPUT0": large})
        timings.append(result.timing)

    cases: dict[str, tuple[Callable[[], Awaitable[Any]], int]] = {
        "small_sonic": (lambda: small_client.infer({"INPUT0": small}), CONCURRENCY),
        "small_tritonclient": (lambda: _tritonclient_call(triton, "identity", small), CONCURRENCY),
        "small_sonic_coalesced": (lambda: small_merged.infer({"INPUT0": small}), CONCURRENCY),
        # Keepalive and the default deadline off (health probes run only after a failure).
        "small_sonic_no_keepalive_no_deadline": (lambda: small_bare.infer({"INPUT0": small}), CONCURRENCY),
        "large_sonic_grpc": (lambda: large_call(large_plain, splits["large_sonic_grpc"]), 1),
        "large_sonic_shm": (lambda: large_call(large_shm, splits["large_sonic_shm"]), 1),
        "large_tritonclient": (lambda: _tritonclient_call(triton, "identity_large", large), 1),
        # Two requests in flight: one is copied while the server works on the other.
        "large_sonic_shm_2_in_flight": (
            lambda: large_call(large_shm, splits["large_sonic_shm_2_in_flight"]),
            2,
        ),
        "large_sonic_shm_zero_copy": (
            lambda: _zero_copy_call(held, large, splits["large_sonic_shm_zero_copy"]),
            1,
        ),
        "large_sonic_shm_zero_copy_borrowing": (
            lambda: _borrowing_call(large_zero_copy, large, splits["large_sonic_shm_zero_copy_borrowing"]),
            1,
        ),
    }
    if large_only or small_only:
        prefix = "large" if large_only else "small"
        cases = {name: case for name, case in cases.items() if name.startswith(prefix)}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    try:
        for _ in range(rounds):
            for name, (call, concurrency) in cases.items():
                runs[name].append(await _measure(call, concurrency, seconds))
    finally:
        await triton.close()
        held.release()
        for client in (small_client, small_merged, small_bare, large_plain, large_shm, large_zero_copy):
            await client.close()
    results: dict[str, Any] = {}
    for name, measured in runs.items():
        best = sorted(measured, key=lambda m: m["requests_per_s"])[len(measured) // 2]  # the median round
        summary: dict[str, Any] = {**best, "requests_per_s_rounds": [m["requests_per_s"] for m in measured]}
        if name.startswith("large"):
            summary["MB_per_s"] = large.nbytes / 1e6 * best["requests_per_s"]
            summary["MB_per_s_rounds"] = [large.nbytes / 1e6 * m["requests_per_s"] for m in measured]
        if name in splits:
            timings = splits[name]
            summary["client_split_s"] = {
                "serialize": sum(t.serialize_s for t in timings) / len(timings),
                "wait": sum(t.wait_s for t in timings) / len(timings),
                "deserialize": sum(t.deserialize_s for t in timings) / len(timings),
            }
        results[name] = summary
    if small_only:
        return _small_ratios(results)
    shm_mb_s = results["large_sonic_shm"]["MB_per_s"]
    for name in ("large_sonic_shm_zero_copy", "large_sonic_shm_zero_copy_borrowing"):
        results[f"ratio_{name.removeprefix('large_sonic_shm_')}_vs_shm"] = (
            results[name]["MB_per_s"] / shm_mb_s
        )
        results[f"ratio_{name.removeprefix('large_sonic_shm_')}_vs_4GB_s_target"] = (
            results[name]["MB_per_s"] / 4000
        )
    if large_only:
        return results
    return _small_ratios(results)


def _small_ratios(results: dict[str, Any]) -> dict[str, Any]:
    def ratio(ours: str, reference: str, metric: str) -> float:
        return float(results[ours][metric] / results[reference][metric])

    bare = "small_sonic_no_keepalive_no_deadline"
    results["resilience_cost_small_requests_per_s"] = ratio("small_sonic", bare, "requests_per_s")
    results["resilience_cost_small_cpu"] = ratio("small_sonic", bare, "cpu_s_per_request")
    triton = "small_tritonclient"
    results["speedup_small_requests_per_s"] = ratio("small_sonic", triton, "requests_per_s")
    results["speedup_small_coalesced_requests_per_s"] = ratio(
        "small_sonic_coalesced", triton, "requests_per_s"
    )
    results["cpu_ratio_small"] = ratio("small_sonic", triton, "cpu_s_per_request")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--server", choices=["sonic", "triton"], default="sonic")
    parser.add_argument("--seconds", type=float, default=3.0, help="measurement time per case and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    parser.add_argument("--large-only", action="store_true", help="only the 15.6 MB cases")
    parser.add_argument("--small-only", action="store_true", help="only the [1, 16] cases")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/client.json"))
    args = parser.parse_args()
    steady_malloc()  # this process is the load generator: see benchmarks.harness.processes.steady_malloc
    with tempfile.TemporaryDirectory(prefix="sonic-bench-") as tmp:
        repo = write_test_repository(Path(tmp) / "repo", args.server)
        if args.server == "sonic":
            server_cm: Any = ServerProcess.start([repo])
        else:
            server_cm = TritonProcess.start([repo], models=[m.name for m in MODELS], workdir=Path(tmp))
        with server_cm as server:
            results = asyncio.run(
                run(
                    server.grpc_address,
                    args.seconds,
                    args.rounds,
                    large_only=args.large_only,
                    small_only=args.small_only,
                )
            )
    report = {
        "server": args.server,
        "machine": {
            "arch": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_end": os.getloadavg(),
        },
        "concurrency_small": CONCURRENCY,
        "large_shape": LARGE_SHAPE,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
