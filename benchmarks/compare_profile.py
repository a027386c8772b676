"""Where ``sonic serve`` spends its time in the comparisons' workloads (docs/benchmarks.md, "Comparisons").

    .venv/bin/python -m benchmarks.compare_profile profile MODEL BATCH CONCURRENCY
    .venv/bin/python -m benchmarks.compare_profile switch

``profile``: py-spy (``pip install py-spy``) samples ``sonic serve --loop asyncio`` for 12 s while the lean load
generator sends MODEL requests of BATCH rows from CONCURRENCY callers; prints the share of samples per thread
and part (grpc.aio, our code, onnxruntime) and the top frames. ``switch``: the same server with the default
GIL switch interval (5 ms) and with 0.5 ms (set by a ``sitecustomize`` module), side by side in 4 alternating
rounds on FACILE b16000 c2, DeepCalo b10 c32 and identity b1 c32.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.compare.repositories import build_repositories
from benchmarks.compare.workloads import THREADS
from benchmarks.harness.load import grpc_load, infer_request_bytes
from benchmarks.harness.ratios import paired_ratios
from benchmarks.harness.report import RESULTS
from benchmarks.harness.rounds import visits
from benchmarks.harness.servers import ServerSet
from sonic.launch import ServerProcess
from sonic.models.zoo import registry

SERVE_ARGS = ["--backend-config", f"onnxruntime,intra_op_thread_count={THREADS}", "--loop", "asyncio"]


def inputs(model: str, batch: int) -> dict[str, npt.NDArray[Any]]:
    if model == "identity":
        return {"INPUT0": np.ones((batch, 16), np.float32)}
    made = registry()[model].make_inputs(batch, np.random.default_rng(0))
    return {name: np.ascontiguousarray(array, np.float32) for name, array in made.items()}


def load(address: str, model: str, batch: int, concurrency: int, seconds: float) -> float:
    feeds = inputs(model, batch)
    payload = infer_request_bytes(model, feeds, dict.fromkeys(feeds, "FP32"))
    result = asyncio.run(
        grpc_load(address, payload, concurrency=concurrency, batch=batch, duration_s=seconds, warmup_s=1.0)
    )
    return result.inferences_per_s


def part(frames: list[str]) -> str:
    thread = frames[0]
    if "_poll_wrapper" in thread:
        return "grpc.aio poller thread (C-core completion queue)"
    if "MainThread" not in thread:
        return f"model instance thread ({thread.split(':')[-1].strip()})"
    if any("sonic/server" in f or "sonic/protocol" in f for f in frames):
        return "event loop: our code (and what it calls)"
    if frames[-1].startswith("Handle._run"):
        return "event loop: grpc.aio Cython/C callbacks"
    if "select" in frames[-1]:
        return "event loop: epoll wait"
    return "event loop: other asyncio machinery"


def profile(model: str, batch: int, concurrency: int) -> None:
    repositories = build_repositories()
    raw = RESULTS / "raw" / f"compare-pyspy-{model}-b{batch}-c{concurrency}.txt"
    py_spy = Path(sys.executable).parent / "py-spy"
    with ServerProcess.start([repositories["sonic"]], extra_args=SERVE_ARGS) as server:
        command = [str(py_spy), "record", "--pid", str(server.pid), "-d", "12", "-r", "250"]
        command += ["--format", "raw", "-o", str(raw), "--nonblocking", "--threads"]
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            rate = load(server.grpc_address, model, batch, concurrency, 14.0)
        finally:
            spy.wait()
    parts: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = stack.split(";")
        total += count
        parts[part(frames)] += count
        leaves[frames[-1]] += count
    print(f"{model} b{batch} c{concurrency}: {rate:,.0f} inf/s while sampled, {total} samples ({raw})")
    for name, count in parts.most_common():
        print(f"{100 * count / total:5.1f}%  {name}")
    print("top frames (self):")
    for name, count in leaves.most_common(12):
        print(f"{100 * count / total:5.1f}%  {name}")


def switch_interval() -> None:
    repositories = build_repositories()
    cases = {"facile b16000 c2": ("facile", 16000, 2), "deepcalo b10 c32": ("deepcalo", 10, 32)}
    cases["identity b1 c32"] = ("identity", 1, 32)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sonic-switch-") as folder, ServerSet() as servers:
        Path(folder, "sitecustomize.py").write_text("import sys\n\nsys.setswitchinterval(0.0005)\n")
        env = {**os.environ, "PYTHONPATH": folder}
        servers.add("5 ms", ServerProcess.start([repositories["sonic"]], extra_args=SERVE_ARGS))
        servers.add("0.5 ms", ServerProcess.start([repositories["sonic"]], extra_args=SERVE_ARGS, env=env))
        for visit in visits(4, list(cases), list(servers), how="alternate"):
            model, batch, concurrency = cases[visit.workload]
            rate = load(servers[visit.server].grpc_address, model, batch, concurrency, 3.0)
            rows.append({"round": visit.round, "case": visit.workload, "server": visit.server, "rate": rate})
            print(f"[{visit.round}] {visit.workload:18s} {visit.server:6s} {rate:12,.0f} inf/s", flush=True)
    for case in cases:
        ratio = paired_ratios([r for r in rows if r["case"] == case], "rate", "0.5 ms", "5 ms")
        if ratio is not None:
            print(f"{case}: 0.5 ms / 5 ms = {ratio.median:.2f}x [{ratio.min:.2f}-{ratio.max:.2f}]")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("profile")
    one.add_argument("model")
    one.add_argument("batch", type=int)
    one.add_argument("concurrency", type=int)
    commands.add_parser("switch")
    args = parser.parse_args()
    if args.command == "profile":
        profile(args.model, args.batch, args.concurrency)
    else:
        switch_interval()


if __name__ == "__main__":
    main()
