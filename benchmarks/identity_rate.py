"""Request-rate-bound speed against real Triton: identity batch 1, 32 requests in flight, tritonclient load.

The shape of the independent harness of issue 11: the official ``tritonclient.grpc.aio`` as the load
(one InferInput built per call), each server started fresh for each window, warm-up then one
measured window, sonic and Triton alternating on the same machine. Prints requests/s, the server's CPU
use (cores) and the sonic/Triton ratio of each round, then the median ratio.

    .venv/bin/python -m benchmarks.identity_rate [--rounds 3] [--window-s 8] [--warmup-s 3]

Uses the repositories of ``benchmarks.compare`` (built on first use; identity model only).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import site
import statistics
import sysconfig
import time
from pathlib import Path

import numpy as np

from benchmarks.common import cpu_seconds
from benchmarks.compare import RAW, THREADS, TRITON_MODEL, triton_config, tritonclient_run
from sonic.launch import ServerProcess
from sonic.testing.repository import MODELS, write_test_repository
from sonic.testing.triton import TritonProcess

CONCURRENCY = 32


def build() -> dict[str, Path]:
    sonic_repo, triton_repo = RAW / "rate-sonic", RAW / "rate-triton"
    write_test_repository(sonic_repo, "sonic", tuple(m for m in MODELS if m.name == "identity"))
    config = (sonic_repo / "identity" / "config.pbtxt").read_text()
    (triton_repo / "identity" / "1").mkdir(parents=True, exist_ok=True)
    (triton_repo / "identity" / "config.pbtxt").write_text(triton_config(config))
    paths = list(
        dict.fromkeys(
            [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
        )
    )
    onnx = sonic_repo / "identity" / "1" / "model.onnx"
    source = TRITON_MODEL.format(onnx=str(onnx), paths=paths, threads=THREADS)
    (triton_repo / "identity" / "1" / "model.py").write_text(source)
    return {"sonic": sonic_repo, "triton": triton_repo}


def start(name: str, repositories: dict[str, Path]) -> ServerProcess | TritonProcess:
    if name == "sonic":
        extra = ["--backend-config", f"onnxruntime,intra_op_thread_count={THREADS}"]
        return ServerProcess.start([repositories["sonic"]], extra_args=extra, log_path=RAW / "rate-sonic.log")
    # The Python-backend stub links libpython: point it at this interpreter's own.
    libdir = sysconfig.get_config_var("LIBDIR")
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (libdir, os.environ.get("LD_LIBRARY_PATH")) if p
    )
    workdir = RAW / "rate-triton-work"
    workdir.mkdir(parents=True, exist_ok=True)
    return TritonProcess.start([repositories["triton"]], models=["identity"], workdir=workdir)


def one_window(
    name: str, repositories: dict[str, Path], window_s: float, warmup_s: float
) -> tuple[float, float]:
    """Requests/s and server cores used in one window, on a freshly started server."""
    server = start(name, repositories)
    try:
        feeds = {"INPUT0": np.ones((1, 16), np.float32)}
        address = server.grpc_address
        pid = server.pid
        cpu: list[float] = []

        async def measured() -> dict[str, float]:
            # Warm-up inside tritonclient_run; the CPU clock starts with the window.
            loop = asyncio.get_running_loop()
            loop.call_later(warmup_s, lambda: cpu.extend((cpu_seconds(pid), time.perf_counter())))
            return await tritonclient_run(address, "identity", feeds, CONCURRENCY, window_s, warmup_s)

        result = asyncio.run(measured())
        used = (cpu_seconds(pid) - cpu[0]) / (time.perf_counter() - cpu[1])
        return result["requests_per_s"], used
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=8.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    args = parser.parse_args()
    repositories = build()
    ratios = []
    for index in range(args.rounds):
        order = ("sonic", "triton") if index % 2 == 0 else ("triton", "sonic")
        rates = {}
        for name in order:
            rate, cores = one_window(name, repositories, args.window_s, args.warmup_s)
            rates[name] = rate
            print(f"round {index + 1} {name:7s} {rate:8.0f} req/s  {cores:.2f} cores", flush=True)
        ratios.append(rates["sonic"] / rates["triton"])
        print(f"round {index + 1} sonic/triton {ratios[-1]:.2f}", flush=True)
    print(f"median sonic/triton {statistics.median(ratios):.2f} over {args.rounds} rounds")


if __name__ == "__main__":
    main()
