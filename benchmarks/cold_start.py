"""A fresh server's first load windows vs its steady state (DeepCalo-like model, batch-10 requests).

The issue-13 measurement: ``sonic serve`` starts, and ``--concurrency`` closed-loop gRPC callers at
once send batch-10 DeepCalo requests (dynamic batching, preferred 40/80, max 256); the inferences/s
of ``--windows`` consecutive windows of ``--window`` seconds are printed. Two servers: ``cold``
with ``warmup_merged_batches: "0"`` (no warm-up at load, as before) and ``warm`` with the default
(zeros at 256, 80 and 40 rows run at load, before the model reports ready; see
src/sonic/server/warmup.py).

Usage: ``./dev bench cold_start [--window 8] [--windows 3] [--concurrency 32]``.
Writes ``benchmarks/results/cold_start.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import grpc_load, infer_request_bytes, machine, save
from sonic.launch import ServerProcess
from sonic.models.build import build_model
from sonic.models.zoo.deepcalo import DEEPCALO

OFF = '\nparameters { key: "warmup_merged_batches" value { string_value: "0" } }\n'


def windows(address: str, payload: bytes, args: argparse.Namespace) -> list[float]:
    rates = []
    for _ in range(args.windows):
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
    args = parser.parse_args()
    inputs = DEEPCALO.make_inputs(10, np.random.default_rng(0))
    payload = infer_request_bytes("deepcalo", inputs, dict.fromkeys(inputs, "FP32"))
    results = {}
    with tempfile.TemporaryDirectory(prefix="sonic-bench-cold-") as tmp:
        model_dir = build_model(DEEPCALO, Path(tmp))
        config = model_dir / "config.pbtxt"
        original = config.read_text()
        for name, text in (("cold", original + OFF), ("warm", original)):
            config.write_text(text)
            started = time.perf_counter()
            with ServerProcess.start([Path(tmp)]) as server:
                ready_s = time.perf_counter() - started
                rates = windows(server.grpc_address, payload, args)
            results[name] = {"ready_s": round(ready_s, 2), "inferences_per_s": rates}
            print(f"| {name} | ready after {ready_s:.1f} s | " + " | ".join(f"{r:.0f}" for r in rates) + " |")
    save("cold_start", {"results": results, "window_s": args.window, **machine()})


if __name__ == "__main__":
    main()
