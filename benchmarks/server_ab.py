"""Paired A/B of ``sonic serve`` from two or more source trees: server CPU per request and requests/s.

Every tree's server runs at once; the same lean load generator (pre-serialized ModelInferRequest over
grpc.aio, ``benchmarks.harness.load.grpc_load``) visits them in turn, the order reversed every other round,
so load from elsewhere hits all alike and each round gives a ratio. Workloads: identity ``[1, 16]`` FP32
at 32 in flight, and 1693 x 48 x 48 x 1 FP32 (15.6 MB each way) at 1 in flight; ``--workload inline``:
identity at 1 and 32 in flight and FACILE (100 channels) at 32, the models ``--inline-execution-us`` is for. ``--protocol http``
sends the same tensors to the HTTP/REST front end instead (binary tensor extension, aiohttp client,
``--tag`` names the results file).

    .venv/bin/python -m benchmarks.server_ab --tree base=/path/to/old/src --tree after=src [--rounds 4]
    .venv/bin/python -m benchmarks.server_ab --tree off=src --tree on=src --server-args "on=--traffic-log DIR"
    .venv/bin/python -m benchmarks.server_ab --workload small --tree base=/path/to/old/src --tree off=src \
        --tree on=src --server-args "on=--trace-config level=TIMESTAMPS --trace-config triton,file=FILE"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np
import numpy.typing as npt

from benchmarks.harness.load import infer_request_bytes, load_with_server_cpu
from benchmarks.harness.processes import cpu_seconds, memcpy_floor_s, steady_malloc
from benchmarks.harness.ratios import paired_ratios, per_server
from benchmarks.harness.report import save
from benchmarks.harness.rounds import visits
from benchmarks.harness.servers import (
    ServerSet,
    parse_named,
    set_cpu_instances,
    set_max_batch_size,
    start_trees,
)
from sonic.launch import ServerHandle, ServerProcess
from sonic.models.build import build_model
from sonic.models.zoo.facile import FACILE, make_inputs
from sonic.testing.repository import write_test_repository

LARGE_SHAPE = (1693, 48, 48, 1)


@dataclass(frozen=True)
class Workload:
    label: str
    model: str
    array: npt.NDArray[np.float32]
    concurrency: int
    window_s: float
    input_name: str = "INPUT0"
    warmup_s: float = 1.0  # a window of its own before the measured one: long enough for a request


def http_request(model: str, array: npt.NDArray[np.float32]) -> tuple[str, bytes, dict[str, str]]:
    """The path, body and headers of an HTTP infer call with ``array`` as a binary FP32 tensor."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": list(array.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": array.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    headers = {
        "Inference-Header-Content-Length": str(len(header)),
        "Content-Type": "application/octet-stream",
    }
    return f"/v2/models/{model}/infer", header + array.tobytes(), headers


async def _http_window(
    url: str, body: bytes, headers: dict[str, str], concurrency: int, seconds: float
) -> int:
    """Calls completed by ``concurrency`` callers back to back over ``seconds`` (keep-alive connections)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    done = 0
    async with aiohttp.ClientSession() as session:

        async def caller() -> None:
            nonlocal done
            while loop.time() < deadline:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"HTTP {response.status} from {url}")
                done += 1

        await asyncio.gather(*(caller() for _ in range(concurrency)))
    return done


def measure(workload: Workload, server: ServerHandle, protocol: str) -> tuple[float, float]:
    """Requests/s and server CPU µs per request of one window (after 1 s of warm-up load)."""
    if protocol == "http":
        assert isinstance(server, ServerProcess)
        request = http_request(workload.model, workload.array)
        return http_load_with_server_cpu(
            server.http_address,
            request,
            server.pid,
            concurrency=workload.concurrency,
            window_s=workload.window_s,
        )
    name = workload.input_name
    payload = infer_request_bytes(workload.model, {name: workload.array}, {name: "FP32"})
    result, cpu_us = load_with_server_cpu(
        server.grpc_address,
        payload,
        server.pid,
        concurrency=workload.concurrency,
        window_s=workload.window_s,
        warmup_s=workload.warmup_s,
    )
    return result.requests_per_s, cpu_us


def http_load_with_server_cpu(
    address: str, request: tuple[str, bytes, dict[str, str]], pid: int, *, concurrency: int, window_s: float
) -> tuple[float, float]:
    """Requests/s and server CPU µs per request over one window, after 1 s of warm-up load."""
    path, body, headers = request
    url = f"http://{address}{path}"
    asyncio.run(_http_window(url, body, headers, concurrency, 1.0))
    before, start = cpu_seconds(pid), time.perf_counter()
    done = max(asyncio.run(_http_window(url, body, headers, concurrency, window_s)), 1)
    return done / (time.perf_counter() - start), 1e6 * (cpu_seconds(pid) - before) / done


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a src/ folder")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    parser.add_argument("--tag", default="", help="results go to results/server_ab-TAG.json")
    parser.add_argument(
        "--instances", type=int, default=0, help="instances per model for every tree (0: each tree's default)"
    )
    parser.add_argument(
        "--workload",
        choices=["all", "small", "large", "inline"],
        default="all",
        help="small: identity b1 c32 only; inline: identity b1 c1 and c32, FACILE b100 c32 (issue 37 item 3)",
    )
    parser.add_argument(
        "--large-rows",
        type=int,
        default=LARGE_SHAPE[0],
        help="rows of 48 x 48 x 1 FP32 in the large workload (default 1693: 15.6 MB; 4400: 40.5 MB)",
    )
    parser.add_argument(
        "--server-args",
        action="append",
        default=[],
        help="NAME=ARGS: more sonic serve arguments for one tree (the same PATH may run under two NAMEs)",
    )
    args = parser.parse_args()
    steady_malloc()  # this process is the load generator: see benchmarks.harness.processes.steady_malloc
    trees = parse_named(args.tree, "--tree")
    repository = write_test_repository(Path(tempfile.mkdtemp(prefix="sonic-ab-")), "sonic")
    if args.instances:
        for name in ("identity", "identity_large"):
            set_cpu_instances(repository, name, args.instances)
    set_max_batch_size(repository, "identity_large", args.large_rows)
    large_shape = (args.large_rows, *LARGE_SHAPE[1:])
    large_array = np.random.default_rng(0).random(large_shape, dtype=np.float32)
    small_array = np.ones((1, 16), np.float32)
    workloads = tuple(
        workload
        for workload in (
            Workload("identity b1 c32", "identity", small_array, 32, 3.0),
            # Over ~20 MB a request under load may take most of a second: a warm-up window of 3 s.
            Workload(
                f"{large_array.nbytes / 1e6:.1f} MB c1",
                "identity_large",
                large_array,
                1,
                4.0,
                warmup_s=1.0 if large_array.nbytes < 20e6 else 3.0,
            ),
        )
        if args.workload == "all" or (args.workload == "small") == (workload.model == "identity")
    )
    if args.workload == "inline":
        build_model(FACILE, repository)
        facile = make_inputs(100, np.random.default_rng(0))["rechit_features"]
        workloads = (
            Workload("identity b1 c1", "identity", small_array, 1, 3.0),
            Workload("identity b1 c32", "identity", small_array, 32, 3.0),
            Workload("FACILE b100 c32", "facile", facile, 32, 3.0, "rechit_features"),
        )
    rows: list[dict[str, float | int | str]] = []
    with ServerSet() as servers:
        extra = ["--http-port", "0"] if args.protocol == "http" else []
        start_trees(
            servers,
            trees,
            [repository],
            extra_args=extra,
            per_tree_args=parse_named(args.server_args, "--server-args"),
        )
        for visit in visits(args.rounds, workloads, list(trees), how="alternate"):
            workload, name = visit.workload, visit.server
            rate, cpu_us = measure(workload, servers[name], args.protocol)
            # Transfers: the memcpy floor right after the window, so both see the same machine.
            floor_us = 1e6 * memcpy_floor_s(workload.array) if workload.concurrency == 1 else 0.0
            rows.append(
                {
                    "round": visit.round,
                    "workload": workload.label,
                    "tree": name,
                    "requests_per_s": rate,
                    "server_cpu_us_per_request": cpu_us,
                    "memcpy_floor_us": floor_us,
                    "cpu_over_floor": cpu_us / floor_us if floor_us else 0.0,
                }
            )
            print(
                f"round {visit.round} {workload.label:16s} {name:8s} {rate:9.1f} req/s "
                f"{cpu_us:8.0f} server CPU µs/req  load {os.getloadavg()[0]:.1f}"
                + (f"  memcpy floor {floor_us:6.0f} µs ({cpu_us / floor_us:.2f}x)" if floor_us else ""),
                flush=True,
            )
    summary: dict[str, dict[str, float]] = {}
    for workload in workloads:
        mine = [r for r in rows if r["workload"] == workload.label]
        rates, cpus = (
            per_server(mine, "requests_per_s", who="tree"),
            per_server(mine, "server_cpu_us_per_request", who="tree"),
        )
        floors = per_server(mine, "cpu_over_floor", who="tree")
        for name in trees:
            rate, cpu, floor = rates[name].median, cpus[name].median, floors[name].median
            summary[f"{workload.label} {name}"] = {
                "requests_per_s": rate,
                "server_cpu_us_per_request": cpu,
                "cpu_over_memcpy_floor": floor,
            }
            print(
                f"{workload.label:16s} {name:8s} median {rate:9.1f} req/s  {cpu:8.0f} server CPU µs/req"
                + (f"  {floor:.2f}x the memcpy floor" if floor else "")
            )
        first = next(iter(trees))
        for name in list(trees)[1:]:
            for key in ("requests_per_s", "server_cpu_us_per_request"):
                if (ratio := paired_ratios(mine, key, name, first, who="tree")) is not None:
                    print(f"{workload.label:16s} {name}/{first} {key} per round {ratio.text()}")
    name = "server_ab" + (f"-{args.tag}" if args.tag else "")
    results = {"trees": trees, "protocol": args.protocol, "rows": rows, "summary": summary}
    print(f"saved {save(name, results)}")


if __name__ == "__main__":
    main()
