"""gRPC frontends side by side: the native HTTP/2 one, grpcio's asyncio server, and a do-nothing servicer.

Three server processes, all on uvloop, loaded in turn by the same lean generator (the ``sonic perf``
engine: pre-serialized ModelInferRequest over grpc.aio):

- ``native``: ``sonic serve`` (default ``--grpc-server native``);
- ``grpcio``: ``sonic serve --grpc-server grpcio``;
- ``do-nothing``: a grpc.aio servicer that answers every ModelInfer with an empty message — the
  ceiling of any server built on grpcio's server (the issue quotes it at 0.67x Triton).

Workloads: identity ``[1, 16]`` FP32 at concurrency 1, 8 and 32 (requests/s, server CPU µs per request),
and 1693 x 48 x 48 x 1 FP32 (15.6 MB each way) at concurrency 1 (MB/s of request tensor; the do-nothing
servicer is left out: it returns no tensor). Rounds rotate the servers; ratios are per round.
The do-nothing servicer is ``templates/do_nothing_grpc.py``.

    .venv/bin/python -m benchmarks.grpc_frontend [--rounds 3] [--window-s 4]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.load import infer_request_bytes, load_with_server_cpu
from benchmarks.harness.processes import steady_malloc
from benchmarks.harness.ratios import paired_ratios, per_server
from benchmarks.harness.report import machine, save
from benchmarks.harness.rounds import visits
from benchmarks.harness.servers import ServerSet
from sonic.launch import ServerHandle, ServerProcess, free_port, terminate
from sonic.launch.process import temporary_log
from sonic.testing.repository import write_test_repository

LARGE_SHAPE = (1693, 48, 48, 1)
SERVERS = ("native", "grpcio", "do-nothing")
DO_NOTHING = Path(__file__).resolve().parent / "templates" / "do_nothing_grpc.py"


@dataclass(frozen=True)
class Workload:
    label: str
    payload: bytes
    concurrency: int
    tensor_bytes: int = 0  # the transfer workload: MB/s of request tensor

    def servers(self) -> tuple[str, ...]:
        return SERVERS[:2] if self.tensor_bytes else SERVERS  # the do-nothing servicer returns no tensor


def start_do_nothing() -> ServerHandle:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(DO_NOTHING), str(port)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        terminate(process, timeout_s=5)
        raise RuntimeError("the do-nothing servicer did not start")
    return ServerHandle(process, {"grpc": f"127.0.0.1:{port}"}, temporary_log("do-nothing-"))


def run(rounds: int, window_s: float) -> dict[str, Any]:
    repository = write_test_repository(Path(tempfile.mkdtemp(prefix="sonic-frontend-")), "sonic")
    small = infer_request_bytes("identity", {"INPUT0": np.ones((1, 16), np.float32)}, {"INPUT0": "FP32"})
    large_array = np.random.default_rng(0).random(LARGE_SHAPE, dtype=np.float32)
    large = infer_request_bytes("identity_large", {"INPUT0": large_array}, {"INPUT0": "FP32"})
    workloads = [Workload(f"identity c{c}", small, c) for c in (1, 8, 32)]
    workloads.append(Workload("15.6 MB c1", large, 1, large_array.nbytes))
    rows: list[dict[str, Any]] = []
    with ServerSet() as servers:
        servers.add("native", ServerProcess.start([repository]))
        servers.add("grpcio", ServerProcess.start([repository], extra_args=["--grpc-server", "grpcio"]))
        servers.add("do-nothing", start_do_nothing())
        for visit in visits(rounds, workloads, Workload.servers, how="rotate"):
            workload, server = visit.workload, servers[visit.server]
            result, cpu_us = load_with_server_cpu(
                server.grpc_address,
                workload.payload,
                server.pid,
                concurrency=workload.concurrency,
                window_s=window_s,
            )
            row = {"round": visit.round, "workload": workload.label, "server": visit.server, **vars(result)}
            row["server_cpu_us_per_request"] = round(cpu_us, 1)
            if workload.tensor_bytes:
                row["MB_per_s"] = round(result.requests_per_s * workload.tensor_bytes / 1e6, 1)
            rows.append(row)
            print(
                f"round {visit.round} {workload.label:14s} {visit.server:10s} {result.requests_per_s:9.1f} req/s "
                f"p50 {result.p50_ms:7.2f} ms  server CPU {row['server_cpu_us_per_request']} µs/req",
                flush=True,
            )
    return {"rows": rows, "summary": summarize(rows), "machine": machine(), "window_s": window_s}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per workload: each server's median req/s and server CPU per request, native's per-round ratios."""
    summary: dict[str, Any] = {}
    for label in dict.fromkeys(row["workload"] for row in rows):
        mine = [row for row in rows if row["workload"] == label]
        entry: dict[str, Any] = {name: f.median for name, f in per_server(mine, "requests_per_s").items()}
        cpu = per_server(mine, "server_cpu_us_per_request")
        entry["server_cpu_us_per_request"] = {name: f.median for name, f in cpu.items()}
        for reference in ("grpcio", "do-nothing"):
            if (ratio := paired_ratios(mine, "requests_per_s", "native", reference)) is not None:
                entry[f"native/{reference}"] = ratio.as_dict(digits=2)
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
