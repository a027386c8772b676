"""gRPC frontends side by side: the native HTTP/2 one, grpcio's asyncio server, and a do-nothing servicer.

Three server processes, all on uvloop, loaded in turn by the same lean generator (the ``sonic perf``
engine: pre-serialized ModelInferRequest over grpc.aio):

- ``native``: ``sonic serve`` (default ``--grpc-server native``);
- ``grpcio``: ``sonic serve --grpc-server grpcio``;
- ``do-nothing``: a grpc.aio servicer that answers every ModelInfer with an empty message — the
  ceiling of any server built on grpcio's server (the issue quotes it at 0.67x Triton).

Workloads: identity ``[1, 16]`` FP32 at concurrency 1, 8 and 32 (requests/s, server CPU µs per request),
and 1693 x 48 x 48 x 1 FP32 (15.6 MB each way) at concurrency 1 (MB/s of request tensor; the do-nothing
servicer is left out: it returns no tensor). Rounds alternate the servers; ratios are per round.

    .venv/bin/python -m benchmarks.grpc_frontend [--rounds 3] [--window-s 4]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.load import infer_request_bytes, load_with_server_cpu
from benchmarks.harness.processes import steady_malloc
from benchmarks.harness.report import machine, save
from sonic.launch import ServerProcess, free_port, terminate
from sonic.testing.repository import write_test_repository

LARGE_SHAPE = (1693, 48, 48, 1)
DO_NOTHING = """
import sys, grpc, uvloop
from grpc import aio

async def infer(data, context):
    return b""

async def main():
    server = aio.server()
    handler = grpc.unary_unary_rpc_method_handler(infer)
    service = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {"ModelInfer": handler})
    server.add_generic_rpc_handlers((service,))
    server.add_insecure_port("127.0.0.1:" + sys.argv[1])
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()

uvloop.run(main())
"""


def start_do_nothing() -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", DO_NOTHING, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        terminate(process, timeout_s=5)
        raise RuntimeError("the do-nothing servicer did not start")
    return process, f"127.0.0.1:{port}"


def run(rounds: int, window_s: float) -> dict[str, Any]:
    repository = write_test_repository(Path(tempfile.mkdtemp(prefix="sonic-frontend-")), "sonic")
    small = infer_request_bytes("identity", {"INPUT0": np.ones((1, 16), np.float32)}, {"INPUT0": "FP32"})
    large_array = np.random.default_rng(0).random(LARGE_SHAPE, dtype=np.float32)
    large = infer_request_bytes("identity_large", {"INPUT0": large_array}, {"INPUT0": "FP32"})
    workloads = [("identity c1", small, 1), ("identity c8", small, 8), ("identity c32", small, 32)]
    workloads.append(("15.6 MB c1", large, 1))
    native = ServerProcess.start([repository])
    grpcio = ServerProcess.start([repository], extra_args=["--grpc-server", "grpcio"])
    nothing, nothing_address = start_do_nothing()
    servers = {
        "native": (native.grpc_address, native.pid),
        "grpcio": (grpcio.grpc_address, grpcio.pid),
        "do-nothing": (nothing_address, nothing.pid),
    }
    rows: list[dict[str, Any]] = []
    try:
        for round_index in range(rounds):
            order = list(servers)[round_index % 3 :] + list(servers)[: round_index % 3]
            for label, payload, concurrency in workloads:
                for name in order:
                    if name == "do-nothing" and label.startswith("15.6"):
                        continue
                    address, pid = servers[name]
                    result, cpu_us = load_with_server_cpu(
                        address, payload, pid, concurrency=concurrency, window_s=window_s
                    )
                    row = {"round": round_index, "workload": label, "server": name, **vars(result)}
                    row["server_cpu_us_per_request"] = round(cpu_us, 1)
                    if label.startswith("15.6"):
                        row["MB_per_s"] = round(result.requests_per_s * large_array.nbytes / 1e6, 1)
                    rows.append(row)
                    print(
                        f"round {round_index} {label:14s} {name:10s} {result.requests_per_s:9.1f} req/s "
                        f"p50 {result.p50_ms:7.2f} ms  server CPU {row['server_cpu_us_per_request']} µs/req",
                        flush=True,
                    )
    finally:
        native.stop()
        grpcio.stop()
        terminate(nothing, timeout_s=5)
    return {"rows": rows, "summary": summarize(rows), "machine": machine(), "window_s": window_s}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for label in dict.fromkeys(row["workload"] for row in rows):
        per_round: dict[int, dict[str, float]] = {}
        cpu: dict[str, list[float]] = {}
        for row in rows:
            if row["workload"] == label:
                per_round.setdefault(row["round"], {})[row["server"]] = row["requests_per_s"]
                cpu.setdefault(row["server"], []).append(row["server_cpu_us_per_request"])
        names = sorted({name for figures in per_round.values() for name in figures})
        entry: dict[str, Any] = {
            name: statistics.median(figures[name] for figures in per_round.values()) for name in names
        }
        entry["server_cpu_us_per_request"] = {name: statistics.median(values) for name, values in cpu.items()}
        for reference in ("grpcio", "do-nothing"):
            ratios = [f["native"] / f[reference] for f in per_round.values() if reference in f]
            if ratios:
                entry[f"native/{reference}"] = {
                    "median": round(statistics.median(ratios), 2),
                    "rounds": [round(r, 2) for r in ratios],
                }
        summary[label] = entry
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=4.0)
    args = parser.parse_args()
    steady_malloc()  # this process is the load generator: see benchmarks.harness.processes.steady_malloc
    result = run(args.rounds, args.window_s)
    for label, entry in result["summary"].items():
        print(label, entry)
    print("saved", save("grpc_frontend", result))


if __name__ == "__main__":
    main()
