"""Served vs direct throughput of the DeepMET-like TensorFlow GraphDef (concurrency 8).

- served: ``--concurrency`` closed-loop gRPC callers (``benchmarks.common.grpc_load``, one event
  per request, as CMSSW's DeepMET producer sends) against ``sonic serve`` with dynamic batching;
- direct: ``--concurrency`` threads in this process calling the same graph through one TensorFlow
  session (what a framework-side integration would run), one event per call.

Each repeat runs a direct window and a served window back to back (paired). Besides events/s the
script saves the CPU each side spent per event: the direct process's, and for served the server's
and the load generator's (this process). On one machine the load generator's CPU and the transport
of the 198 KB events come out of the same cores the direct side uses for the model alone, so
``served/direct`` is a lower bound for a server on its own machine; ``direct CPU / server CPU`` per
event is the figure for that case (how many events a server core runs per direct-run core).

Usage: ``./dev bench tensorflow_deepmet [--seconds 5] [--concurrency 8] [--repeats 3]
[--instances 0] [--intra-threads 0] [--inter-threads 0] [--transport native|grpcio]``.
Writes ``benchmarks/results/tensorflow_deepmet.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.backends import run_threads
from benchmarks.common import infer_request_bytes, load_with_cpu, machine, save
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


def configure(repo: Path, instances: int, intra_threads: int, inter_threads: int = 0) -> None:
    """The served and the direct side read the same config: same thread settings on both.

    ``instances`` 0 leaves the config's default: two instances for a TensorFlow CPU group, as Triton.
    """
    config = repo / "deepmet" / "config.pbtxt"
    text = config.read_text()
    if instances:
        text += f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n"
    if intra_threads:
        text += f'parameters {{ key: "TF_NUM_INTRA_THREADS" value {{ string_value: "{intra_threads}" }} }}\n'
    if inter_threads:
        text += f'parameters {{ key: "TF_NUM_INTER_THREADS" value {{ string_value: "{inter_threads}" }} }}\n'
    config.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--instances", type=int, default=0, help="served model instances (0: default, 2)")
    parser.add_argument("--intra-threads", type=int, default=0, help="TF_NUM_INTRA_THREADS (0: TF's default)")
    parser.add_argument("--inter-threads", type=int, default=0, help="TF_NUM_INTER_THREADS (0: TF's default)")
    parser.add_argument("--transport", default="native", help="load generator: native (sonic's) or grpcio")
    args = parser.parse_args()
    event = deepmet.example_inputs(1, seed=5)
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="sonic-bench-tf-") as tmp:
        repo = Path(tmp)
        deepmet.write_repository(repo)
        configure(repo, args.instances, args.intra_threads, args.inter_threads)
        backend = direct_backend(repo)

        def make() -> Callable[[], None]:
            def call() -> None:
                backend.execute(event, [OUTPUT])

            return call

        payload = infer_request_bytes("deepmet", event, dict.fromkeys(event, "FP32"))
        with ServerProcess.start([repo]) as server:
            for _ in range(args.repeats):
                cpu = time.process_time()
                direct = run_threads(args.concurrency, args.seconds, make)
                direct_cpu_us = 1e6 * (time.process_time() - cpu) / (direct * args.seconds)
                load = load_with_cpu(
                    server.grpc_address,
                    payload,
                    server.pid,
                    concurrency=args.concurrency,
                    window_s=args.seconds,
                    transport=args.transport,
                )
                served = load.result.inferences_per_s
                rounds.append(
                    {
                        "direct_per_s": direct,
                        "served_per_s": served,
                        "ratio": served / direct,
                        "direct_cpu_us_per_event": direct_cpu_us,
                        "server_cpu_us_per_event": load.server_cpu_us_per_request,
                        "client_cpu_us_per_event": load.client_cpu_us_per_request,
                        "cpu_ratio": direct_cpu_us / load.server_cpu_us_per_request,
                    }
                )
                print(_row(rounds[-1]), flush=True)
        backend.close()
    medians = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print("median " + _row(medians))
    save(
        "tensorflow_deepmet",
        {
            **vars(args),
            "medians": medians,
            "rounds": rounds,
            "network_hidden": list(deepmet.HIDDEN),
            **machine(),
        },
    )


def _row(r: dict[str, Any]) -> str:
    return (
        f"| direct {r['direct_per_s']:.0f} ev/s, {r['direct_cpu_us_per_event']:.0f} µs CPU/ev "
        f"| served {r['served_per_s']:.0f} ev/s, server {r['server_cpu_us_per_event']:.0f} + load generator "
        f"{r['client_cpu_us_per_event']:.0f} µs CPU/ev | served/direct {r['ratio']:.2f} "
        f"| direct/server CPU per event {r['cpu_ratio']:.2f} |"
    )


if __name__ == "__main__":
    main()
