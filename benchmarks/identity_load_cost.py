"""Where identity b1 c32 spends its time, sonic against Triton, per load generator (issue 37).

For each window: requests/s; CPU µs per request of the server (its whole process tree) and of the load
generator (this process); the machine's idle share (``/proc/stat``); per request, the read and write
syscalls and bytes of each side (``/proc/PID/io``: socket reads and writes count there) and their context
switches. Servers are started once; rounds visit every (server, load) pair, the order reversed every
other round, so the ratios are paired.

    .venv/bin/python -m benchmarks.identity_load_cost [--rounds 4] [--window-s 4] [--loads h2 grpcio]
        [--servers sonic triton] [--server-args "sonic=--inline-execution-us 0"] [--tag NAME]

A second sonic tree: ``--tree base=/work/main/src`` (its server is named ``sonic-base``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.compare.repositories import RAW, one_cpu_instance, write_triton_model
from benchmarks.compare.workloads import THREADS
from benchmarks.harness.load import grpc_load, infer_request_bytes
from benchmarks.harness.processes import own_libpython_for_triton, thread_cpu_seconds, tree_cpu_seconds
from benchmarks.harness.report import save
from benchmarks.harness.rounds import ordered
from benchmarks.harness.servers import ServerSet, parse_named
from sonic.launch import ServerHandle, ServerProcess
from sonic.launch.triton import TritonProcess
from sonic.testing.repository import MODELS, write_test_repository

IO_FIELDS = ("syscr", "syscw", "rchar", "wchar")


def build() -> dict[str, Path]:
    sonic_repo, triton_repo = RAW / "cost-sonic", RAW / "cost-triton"
    write_test_repository(sonic_repo, "sonic", tuple(m for m in MODELS if m.name == "identity"))
    config = sonic_repo / "identity" / "config.pbtxt"
    config.write_text(one_cpu_instance(config.read_text()))
    write_triton_model(triton_repo, "identity", sonic_repo)
    return {"sonic": sonic_repo, "triton": triton_repo}


def tree_pids(pid: int) -> list[int]:
    pids = [pid]
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in children.read_text().split():
            pids.extend(tree_pids(int(child)))
    return pids


def counters(pid: int, tree: bool = True) -> dict[str, float]:
    """I/O syscalls and bytes (read/write family only: recvmsg/sendmsg, Triton's, are not counted there)
    and context switches of a process (tree: with its descendants; the load generator's children are
    the servers)."""
    total = dict.fromkeys((*IO_FIELDS, "switches"), 0.0)
    for each in tree_pids(pid) if tree else [pid]:
        for line in Path(f"/proc/{each}/io").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in IO_FIELDS:
                total[key] += int(value)
        for status in Path(f"/proc/{each}/task").glob("*/status"):
            try:
                text = status.read_text()
            except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
                continue
            for line in text.splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total["switches"] += int(line.split()[1])
    return total


def idle_ticks() -> tuple[int, int]:
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return fields[3] + fields[4], sum(fields[:8])


def start(
    name: str, repositories: dict[str, Path], trees: dict[str, str], args: dict[str, str]
) -> ServerHandle:
    if name == "triton":
        own_libpython_for_triton()
        workdir = RAW / "cost-triton-work"
        workdir.mkdir(parents=True, exist_ok=True)
        return TritonProcess.start([repositories["triton"]], models=["identity"], workdir=workdir)
    extra = ["--backend-config", f"onnxruntime,intra_op_thread_count={THREADS}", *args.get(name, "").split()]
    env = None
    if name != "sonic":
        env = {**os.environ, "PYTHONPATH": trees[name.removeprefix("sonic-")]}
    return ServerProcess.start(
        [repositories["sonic"]], extra_args=extra, env=env, log_path=RAW / f"cost-{name}.log"
    )


def window(address: str, pid: int, payload: bytes, load: str, window_s: float) -> dict[str, Any]:
    asyncio.run(
        grpc_load(address, payload, concurrency=32, batch=1, duration_s=1.0, warmup_s=0.0, transport=load)
    )
    server_cpu, client_cpu = tree_cpu_seconds(pid), time.process_time()
    server_io, client_io = counters(pid), counters(os.getpid(), tree=False)
    main_before = thread_cpu_seconds(pid).get(pid, 0.0)
    wall = time.perf_counter()
    idle, total = idle_ticks()
    result = asyncio.run(
        grpc_load(
            address, payload, concurrency=32, batch=1, duration_s=window_s, warmup_s=0.0, transport=load
        )
    )
    idle_after, total_after = idle_ticks()
    wall = time.perf_counter() - wall
    main_cores = (thread_cpu_seconds(pid).get(pid, 0.0) - main_before) / wall
    n = max(result.requests, 1)
    row: dict[str, Any] = {
        "requests_per_s": result.requests_per_s,
        "p50_ms": result.p50_ms,
        "server_cpu_us": round(1e6 * (tree_cpu_seconds(pid) - server_cpu) / n, 1),
        "client_cpu_us": round(1e6 * (time.process_time() - client_cpu) / n, 1),
        "main_thread_cores": round(main_cores, 3),
        "idle_share": round((idle_after - idle) / max(total_after - total, 1), 3),
        "load_average": os.getloadavg()[0],
    }
    for side, pid_of, before in (("server", pid, server_io), ("client", os.getpid(), client_io)):
        after = counters(pid_of, tree=side == "server")
        for key, value in after.items():
            row[f"{side}_{key}"] = round((value - before[key]) / n, 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--window-s", type=float, default=4.0)
    parser.add_argument("--loads", nargs="+", default=["h2", "grpcio"])
    parser.add_argument("--servers", nargs="*", default=["sonic", "triton"])
    parser.add_argument("--tree", action="append", default=[], help="NAME=SRC: server sonic-NAME runs SRC")
    parser.add_argument("--server-args", action="append", default=[], help='SERVER="ARGS"')
    parser.add_argument("--tag", default="")
    options = parser.parse_args()
    trees = parse_named(options.tree, "--tree")
    args = parse_named(options.server_args, "--server-args")
    servers = [*options.servers, *(f"sonic-{name}" for name in trees)]
    repositories = build()
    payload = infer_request_bytes("identity", {"INPUT0": np.ones((1, 16), np.float32)}, {"INPUT0": "FP32"})
    rows: list[dict[str, Any]] = []
    with ServerSet() as running:
        for name in servers:
            running.add(name, start(name, repositories, trees, args))
        for r in range(options.rounds):
            order = ordered(servers, r, "alternate")
            for load in options.loads:
                for name in order:
                    row = window(
                        running[name].grpc_address, running[name].pid, payload, load, options.window_s
                    )
                    row |= {"round": r, "server": name, "load": load}
                    rows.append(row)
                    print(
                        f"[{r}] {load:6s} {name:12s} {row['requests_per_s']:8.0f} req/s server {row['server_cpu_us']:6.1f}"
                        f" client {row['client_cpu_us']:6.1f} µs main {row['main_thread_cores']:.2f} idle {row['idle_share']:.2f} "
                        f"srv r/w {row['server_syscr']:.2f}/{row['server_syscw']:.2f} "
                        f"{row['server_rchar']:.0f}/{row['server_wchar']:.0f} B cs {row['server_switches']:.2f} "
                        f"cli r/w {row['client_syscr']:.2f}/{row['client_syscw']:.2f} "
                        f"{row['client_rchar']:.0f}/{row['client_wchar']:.0f} B cs {row['client_switches']:.2f}",
                        flush=True,
                    )
    for load in options.loads:
        for name in servers:
            mine = [row for row in rows if row["load"] == load and row["server"] == name]
            medians = {
                k: statistics.median(row[k] for row in mine) for k in mine[0] if k not in {"server", "load"}
            }
            print(load, name, {k: round(v, 2) for k, v in medians.items()})
    save(f"identity_load_cost{'-' + options.tag if options.tag else ''}", {"rows": rows})


if __name__ == "__main__":
    main()
