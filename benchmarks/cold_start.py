"""A fresh server's first load windows vs its steady state (DeepCalo-like model, batch-10 requests).

The issue-13 measurement: ``sonic serve`` starts, and ``--concurrency`` closed-loop gRPC callers at
once send batch-10 DeepCalo requests (dynamic batching, preferred 40/80, max 256); the inferences/s
of ``--windows`` consecutive windows of ``--window`` seconds are printed. Two servers: ``cold``
with ``warmup_merged_batches: "0"`` (no warm-up at load, as before) and ``warm`` with the default
(zeros at 256, 80 and 40 rows run at load, before the model reports ready; see
src/sonic/server/models/warmup.py).

``--load tritonclient`` drives the servers with ``tritonclient.grpc.aio`` (InferInputs built per call,
as the issue measured) instead of pre-encoded requests over grpc.aio; ``--baseline-src PATH`` adds a
``base`` server from another checkout's ``src/`` (e.g. before the warm-up existed), run as it was.

Usage: ``./dev bench cold_start [--window 8] [--windows 3] [--concurrency 32] [--load grpcio|tritonclient]
[--baseline-src PATH]``.
Writes ``benchmarks/results/cold_start.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.harness.load import grpc_load, infer_request_bytes, tritonclient_run
from benchmarks.harness.report import machine, save
from sonic.launch import ServerProcess
from sonic.models.build import build_model
from sonic.models.zoo.deepcalo import DEEPCALO

OFF = '\nparameters { key: "warmup_merged_batches" value { string_value: "0" } }\n'


def windows(address: str, inputs: dict[str, npt.NDArray[Any]], args: argparse.Namespace) -> list[float]:
    payload = infer_request_bytes("deepcalo", inputs, dict.fromkeys(inputs, "FP32"))
    rates = []
    for _ in range(args.windows):
        if args.load == "tritonclient":
            run = tritonclient_run(address, "deepcalo", inputs, args.concurrency, args.window, 0.0)
            rates.append(asyncio.run(run)["inferences_per_s"])
            continue
        result = asyncio.run(
            grpc_load(
                address, payload, concurrency=args.concurrency, batch=10, duration_s=args.window, warmup_s=0.0
            )
        )
        rates.append(result.inferences_per_s)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=8.0)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--load", choices=["grpcio", "tritonclient"], default="grpcio")
    parser.add_argument("--baseline-src", type=Path, help="another checkout's src/: a 'base' server too")
    args = parser.parse_args()
    inputs = DEEPCALO.make_inputs(10, np.random.default_rng(0))
    results = {}
    servers: list[tuple[str, str, dict[str, str] | None]] = []
    with tempfile.TemporaryDirectory(prefix="sonic-bench-cold-") as tmp:
        model_dir = build_model(DEEPCALO, Path(tmp))
        config = model_dir / "config.pbtxt"
        original = config.read_text()
        if args.baseline_src:
            servers.append(("base", original, {**os.environ, "PYTHONPATH": str(args.baseline_src)}))
        servers += [("cold", original + OFF, None), ("warm", original, None)]
        for name, text, env in servers:
            config.write_text(text)
            started = time.perf_counter()
            with ServerProcess.start([Path(tmp)], env=env) as server:
                ready_s = time.perf_counter() - started
                rates = windows(server.grpc_address, inputs, args)
            results[name] = {"ready_s": round(ready_s, 2), "inferences_per_s": rates}
            print(f"| {name} | ready after {ready_s:.1f} s | " + " | ".join(f"{r:.0f}" for r in rates) + " |")
    save("cold_start", {"results": results, "window_s": args.window, "load": args.load, **machine()})


if __name__ == "__main__":
    main()
