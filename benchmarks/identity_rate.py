"""Request-rate-bound speed against real Triton: identity batch 1, 32 requests in flight, tritonclient load.

The shape of the independent harness of issue 11: the official ``tritonclient.grpc.aio`` as the load
(one InferInput built per call), each server started fresh for each window, warm-up then one
measured window, sonic and Triton alternating on the same machine. Prints requests/s, the server's CPU
use (cores), its CPU time and thread context switches per request (a hand-off that puts a thread to
sleep costs one context switch: a count the load of the machine changes little), and the sonic/Triton
ratio of each round, then the median ratio.

    .venv/bin/python -m benchmarks.identity_rate [--rounds 3] [--window-s 8] [--warmup-s 3]

Uses the repositories of ``benchmarks.compare`` (built on first use; identity model only).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.compare.repositories import RAW, write_triton_model
from benchmarks.compare.workloads import THREADS
from benchmarks.harness.load import tritonclient_run
from benchmarks.harness.processes import cpu_seconds, own_libpython_for_triton
from benchmarks.harness.ratios import paired_ratios
from benchmarks.harness.rounds import ordered
from sonic.launch import ServerProcess
from sonic.launch.triton import TritonProcess
from sonic.testing.repository import MODELS, write_test_repository

CONCURRENCY = 32


def context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches of every thread of a process, from /proc."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                total += int(line.split()[1])
    return total


def build() -> dict[str, Path]:
    sonic_repo, triton_repo = RAW / "rate-sonic", RAW / "rate-triton"
    write_test_repository(sonic_repo, "sonic", tuple(m for m in MODELS if m.name == "identity"))
    write_triton_model(triton_repo, "identity", sonic_repo)
    return {"sonic": sonic_repo, "triton": triton_repo}


def start(name: str, repositories: dict[str, Path], baseline: Path | None) -> ServerProcess | TritonProcess:
    if name.startswith("sonic"):
        extra = ["--backend-config", f"onnxruntime,intra_op_thread_count={THREADS}"]
        env = None
        if name == "sonic-base" and baseline is not None:  # another checkout's src/, e.g. before a change
            env = {**os.environ, "PYTHONPATH": str(baseline)}
        log = RAW / f"rate-{name}.log"
        return ServerProcess.start([repositories["sonic"]], extra_args=extra, env=env, log_path=log)
    own_libpython_for_triton()
    workdir = RAW / "rate-triton-work"
    workdir.mkdir(parents=True, exist_ok=True)
    return TritonProcess.start([repositories["triton"]], models=["identity"], workdir=workdir)


@dataclass
class Window:
    requests_per_s: float
    cores: float  # server CPU time / wall time
    cpu_us_per_request: float
    switches_per_request: float


def one_window(
    name: str, repositories: dict[str, Path], window_s: float, warmup_s: float, baseline: Path | None
) -> Window:
    """One measured window on a freshly started server (its main process; Triton's Python stub is apart)."""
    server = start(name, repositories, baseline)
    try:
        feeds = {"INPUT0": np.ones((1, 16), np.float32)}
        address = server.grpc_address
        pid = server.pid
        before: list[float] = []

        async def measured() -> dict[str, float]:
            # Warm-up inside tritonclient_run; the CPU clock starts with the window.
            loop = asyncio.get_running_loop()
            loop.call_later(
                warmup_s,
                lambda: before.extend((cpu_seconds(pid), time.perf_counter(), context_switches(pid))),
            )
            return await tritonclient_run(address, "identity", feeds, CONCURRENCY, window_s, warmup_s)

        result = asyncio.run(measured())
        cpu_s = cpu_seconds(pid) - before[0]
        switches = context_switches(pid) - before[2]
        requests = result["requests"]
        return Window(
            result["requests_per_s"],
            cpu_s / (time.perf_counter() - before[1]),
            1e6 * cpu_s / requests,
            switches / requests,
        )
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=8.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="also run 'sonic-base': sonic serve from this src/ (e.g. before a change)",
    )
    args = parser.parse_args()
    repositories = build()
    names = ["sonic", "triton"] + (["sonic-base"] if args.baseline_src else [])
    rows: list[dict[str, float | int | str]] = []
    for index in range(args.rounds):
        for name in ordered(names, index, "rotate"):
            w = one_window(name, repositories, args.window_s, args.warmup_s, args.baseline_src)
            rows.append({"round": index, "server": name, "requests_per_s": w.requests_per_s})
            print(
                f"round {index + 1} {name:10s} {w.requests_per_s:8.0f} req/s  {w.cores:.2f} cores  "
                f"{w.cpu_us_per_request:5.0f} CPU us/request  {w.switches_per_request:5.2f} switches/request",
                flush=True,
            )
        for name in names:
            ratio = paired_ratios([r for r in rows if r["round"] == index], "requests_per_s", name, "triton")
            if name != "triton" and ratio is not None:
                print(f"round {index + 1} {name}/triton {ratio.median:.2f}", flush=True)
    for name in names:
        ratio = paired_ratios(rows, "requests_per_s", name, "triton")
        if name != "triton" and ratio is not None:
            print(f"median {name}/triton {ratio.text()} over {args.rounds} rounds")


if __name__ == "__main__":
    main()
