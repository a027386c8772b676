"""Served vs direct throughput of the DeepMET-like TensorFlow GraphDef (concurrency 8).

- served: ``--concurrency`` closed-loop gRPC callers (``benchmarks.common.grpc_load``, one event
  per request, as CMSSW's DeepMET producer sends) against ``sonic serve`` with dynamic batching;
- direct: ``--concurrency`` threads in this process calling the same graph through one TensorFlow
  session (what a framework-side integration would run), one event per call.

The ratio served/direct is the figure of docs/benchmarks.md (target >= 0.9). Client, server and
direct runs share the machine's cores; the load average is saved with the numbers.

Usage: ``./dev bench tensorflow_deepmet [--seconds 5] [--concurrency 8] [--repeats 3] [--instances 1]``.
Writes ``benchmarks/results/tensorflow_deepmet.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.backends import run_threads
from benchmarks.common import grpc_load, infer_request_bytes, machine, save
from sonic.launch import ServerProcess
from sonic.models import deepmet
from sonic.protocol.model_config import parse_config_text, validate_config
from sonic.server.backends.base import InstanceContext
from sonic.server.backends.tensorflow import TensorFlowBackend

OUTPUT = "output/BiasAdd"


def direct_backend(repo: Path) -> TensorFlowBackend:
    config = parse_config_text((repo / "deepmet" / "config.pbtxt").read_text(), "deepmet")
    config.name = "deepmet"
    version_dir = repo / "deepmet" / "1"
    return TensorFlowBackend(
        InstanceContext(
            config=config,
            spec=validate_config(config),
            version=1,
            version_dir=version_dir,
            model_path=version_dir / "model.graphdef",
            instance_name="direct",
            device_kind="cpu",
            device_id=0,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--instances", type=int, default=1, help="served model instances")
    args = parser.parse_args()
    event = deepmet.example_inputs(1, seed=5)
    with tempfile.TemporaryDirectory(prefix="sonic-bench-tf-") as tmp:
        repo = Path(tmp)
        deepmet.write_repository(repo)
        # Direct runs eight session calls at once; served runs one merged batch per instance at a time.
        config = repo / "deepmet" / "config.pbtxt"
        config.write_text(
            config.read_text() + f"instance_group [ {{ count: {args.instances} kind: KIND_CPU }} ]\n"
        )
        backend = direct_backend(repo)

        def make() -> Callable[[], None]:
            def call() -> None:
                backend.execute(event, [OUTPUT])

            return call

        direct = statistics.median(
            run_threads(args.concurrency, args.seconds, make) for _ in range(args.repeats)
        )
        backend.close()
        payload = infer_request_bytes("deepmet", event, dict.fromkeys(event, "FP32"))
        with ServerProcess.start([repo]) as server:
            served = statistics.median(
                asyncio.run(
                    grpc_load(
                        server.grpc_address,
                        payload,
                        concurrency=args.concurrency,
                        batch=1,
                        duration_s=args.seconds,
                        warmup_s=1.0,
                    )
                ).inferences_per_s
                for _ in range(args.repeats)
            )
    ratio = served / direct
    print(f"| DeepMET-like graphdef, concurrency {args.concurrency} | direct {direct:.1f} ev/s | "
          f"served {served:.1f} ev/s | served/direct {ratio:.2f} |")  # fmt: skip
    save("tensorflow_deepmet", {"direct_per_s": direct, "served_per_s": served, "ratio": ratio, **machine()})


if __name__ == "__main__":
    main()
