"""FACILE (seed 000) served through the hls4ml backend next to onnxruntime: agreement and throughput.

The reference FACILE module (``sonic.models.zoo.facile``, seeded weights) is served twice by one
``sonic serve``: ``facile`` (ONNX, onnxruntime) and ``facile_hls4ml`` (the same module converted by
hls4ml to fixed point, ``--precision``, and run as the firmware's C simulation). Reported:

- agreement: max and mean absolute difference of each served output to the float PyTorch module on
  one event of ``--rows`` channels (hls4ml: the cost of fixed point; onnxruntime: float rounding);
- throughput: channels per second with ``--concurrency`` closed-loop callers sending requests of
  ``--rows`` channels for ``--seconds`` (the ``sonic perf`` engine), dynamic batching on.

The C simulation runs one call per channel on the CPU: it says what the firmware computes, not how
fast a card computes it (seed 000: FPGAs 8x to 80x over a CPU). The first run compiles the firmware
(g++, about a minute on a loaded 2-core machine); later runs take it from the cache.

Usage: ``./dev bench hls4ml_facile [--rows 16000] [--seconds 5] [--concurrency 2]
[--precision 'ap_fixed<24,12>']``. Writes ``benchmarks/results/hls4ml_facile.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.harness.load import grpc_load, infer_request_bytes
from benchmarks.harness.report import machine, save
from sonic.client import ClientConfig, SyncClient
from sonic.launch import ServerProcess
from sonic.models.build import build_model
from sonic.models.zoo.facile import FACILE, make_inputs, make_module

HLS4ML_CONFIG = """name: "facile_hls4ml"
backend: "hls4ml"
max_batch_size: 65536
input [ {{ name: "rechit_features" data_type: TYPE_FP32 dims: [ 14 ] }} ]
output [ {{ name: "energy" data_type: TYPE_FP32 dims: [ 1 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 100 }}
parameters {{ key: "hls4ml_precision" value: {{ string_value: "{precision}" }} }}
parameters {{ key: "buffers_in_flight" value: {{ string_value: "{buffers}" }} }}
"""


def write_repository(root: Path, precision: str, buffers: int) -> None:
    module = make_module()
    build_model(FACILE, root, module)
    folder = root / "facile_hls4ml"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    torch.save(module, folder / "1" / "model.pt")
    (folder / "config.pbtxt").write_text(HLS4ML_CONFIG.format(precision=precision, buffers=buffers))


def agreement(address: str, rows: int) -> dict[str, Any]:
    inputs = make_inputs(rows, np.random.default_rng(0))
    with torch.no_grad():
        expected = make_module()(torch.from_numpy(inputs["rechit_features"])).numpy()
    result: dict[str, Any] = {"float_output_abs_max": float(np.abs(expected).max())}
    for model in ("facile", "facile_hls4ml"):
        with SyncClient(model, ClientConfig(servers=(address,))) as client:
            got = client.infer(inputs)["energy"]
        diff = np.abs(got.astype(np.float64) - expected)
        result[model] = {"max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean())}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=16000, help="channels per request (seed: 16000)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--precision", default="ap_fixed<24,12>", help="hls4ml fixed-point type")
    parser.add_argument("--buffers", type=int, default=2, help="kernel batches in flight")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "models"
        write_repository(root, args.precision, args.buffers)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with ServerProcess.start([root], wait_timeout_s=900, env=env) as server:
            agree = agreement(server.grpc_address, args.rows)
            payload_inputs = make_inputs(args.rows, np.random.default_rng(1))
            throughput = {}
            for model in ("facile", "facile_hls4ml"):
                payload = infer_request_bytes(model, payload_inputs, {"rechit_features": "FP32"})
                load = asyncio.run(
                    grpc_load(server.grpc_address, payload, concurrency=args.concurrency, batch=args.rows,
                              duration_s=args.seconds, warmup_s=1.0)
                )  # fmt: skip
                throughput[model] = load
    print(f"FACILE, {args.rows} channels per request, hls4ml precision {args.precision}, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| backend | channels/s | requests/s | p50 ms | max abs diff to float | mean abs diff |")
    print("|---|---|---|---|---|---|")
    for model, label in (("facile", "onnxruntime"), ("facile_hls4ml", "hls4ml C simulation")):
        load, diff = throughput[model], agree[model]
        print(f"| {label} | {load.inferences_per_s:,.0f} | {load.requests_per_s:.1f} | {load.p50_ms:.1f} | "
              f"{diff['max_abs_diff']:.3g} | {diff['mean_abs_diff']:.3g} |")  # fmt: skip
    save(
        "hls4ml_facile",
        {"machine": machine(), "args": vars(args), "agreement": agree, "throughput": throughput},
    )


if __name__ == "__main__":
    main()
