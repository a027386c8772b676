"""Ragged batching vs one request per execution, on requests of random lengths.

The ``ragged_sum`` model (src/sonic/models/ragged.py: per-request sums of a variable-length input,
``allow_ragged_batch`` with batch inputs and a scattered output) is served twice by one
``sonic serve``: ``ragged`` with dynamic batching (requests of different lengths merge into one
execution), ``unbatched`` without (each request runs alone, which is what a model with a
variable-length input gets without ragged batching). ``--concurrency`` closed-loop gRPC callers
send requests of ``--min-length`` to ``--max-length`` elements in random order.

Usage: ``./dev bench ragged_batching [--seconds 5] [--concurrency 16] [--repeats 3]``.
Writes ``benchmarks/results/ragged_batching.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.harness.load import grpc_load, infer_request_bytes
from benchmarks.harness.report import machine, save
from sonic.launch import ServerProcess
from sonic.models.ragged import write_ragged_sum


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-length", type=int, default=10)
    parser.add_argument("--max-length", type=int, default=2000)
    args = parser.parse_args()
    rng = np.random.default_rng(3)
    lengths = rng.integers(args.min_length, args.max_length + 1, size=64)
    results = {}
    with tempfile.TemporaryDirectory(prefix="sonic-bench-ragged-") as tmp:
        repo = Path(tmp)
        write_ragged_sum(repo, "ragged", "dynamic_batching { }\n")
        write_ragged_sum(repo, "unbatched")
        with ServerProcess.start([repo]) as server:
            for model in ("unbatched", "ragged"):
                payloads = [
                    infer_request_bytes(
                        model, {"INPUT": rng.normal(size=(1, int(n))).astype(np.float32)}, {"INPUT": "FP32"}
                    )
                    for n in lengths
                ]
                runs = [
                    asyncio.run(
                        grpc_load(
                            server.grpc_address,
                            payloads,
                            concurrency=args.concurrency,
                            batch=1,
                            duration_s=args.seconds,
                            warmup_s=1.0,
                        )
                    )
                    for _ in range(args.repeats)
                ]
                results[model] = {
                    "requests_per_s": statistics.median(r.requests_per_s for r in runs),
                    "p50_ms": statistics.median(r.p50_ms for r in runs),
                }
    gain = results["ragged"]["requests_per_s"] / results["unbatched"]["requests_per_s"]
    for model, figures in results.items():
        print(f"| {model} | {figures['requests_per_s']:.0f} req/s | p50 {figures['p50_ms']:.2f} ms |")
    print(f"ragged / unbatched: {gain:.2f}x")
    save("ragged_batching", {"results": results, "gain": gain, "lengths": lengths.tolist(), **machine()})


if __name__ == "__main__":
    main()
