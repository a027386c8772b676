"""Paired A/B of ``sonic serve`` from two or more source trees: server CPU per request and requests/s.

Every tree's server runs at once; the same lean load generator (pre-serialized ModelInferRequest over
grpc.aio, ``benchmarks.common.grpc_load``) visits them in turn, the order reversed every other round,
so load from elsewhere hits all alike and each round gives a ratio. Workloads: identity ``[1, 16]`` FP32
at 32 in flight, and 1693 x 48 x 48 x 1 FP32 (15.6 MB each way) at 1 in flight.

    .venv/bin/python -m benchmarks.server_ab --tree base=/path/to/old/src --tree after=src [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from benchmarks.common import (
    infer_request_bytes,
    load_with_server_cpu,
    save,
    steady_malloc,
)
from sonic.launch import ServerProcess
from sonic.protocol.model_config import parse_config_text
from sonic.testing.repository import write_test_repository

LARGE_SHAPE = (1693, 48, 48, 1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a src/ folder")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--instances", type=int, default=0, help="instances per model for every tree (0: each tree's default)"
    )
    args = parser.parse_args()
    steady_malloc()  # this process is the load generator: see benchmarks.common.steady_malloc
    trees = dict(item.split("=", 1) for item in args.tree)
    repository = write_test_repository(Path(tempfile.mkdtemp(prefix="sonic-ab-")), "sonic")
    if args.instances:  # every tree runs the same instance count, whatever its defaults
        for name in ("identity", "identity_large"):
            path = repository / name / "config.pbtxt"
            config = parse_config_text(path.read_text(), name)
            config.ClearField("instance_group")
            config.instance_group.add(count=args.instances, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
            path.write_text(text_format.MessageToString(config))
    small = infer_request_bytes("identity", {"INPUT0": np.ones((1, 16), np.float32)}, {"INPUT0": "FP32"})
    large_array = np.random.default_rng(0).random(LARGE_SHAPE, dtype=np.float32)
    large = infer_request_bytes("identity_large", {"INPUT0": large_array}, {"INPUT0": "FP32"})
    workloads = (("identity b1 c32", small, 32, 3.0), ("15.6 MB c1", large, 1, 4.0))
    servers = {
        name: ServerProcess.start([repository], env={**os.environ, "PYTHONPATH": str(Path(src).resolve())})
        for name, src in trees.items()
    }
    rows: list[dict[str, float | int | str]] = []
    try:
        for round_index in range(args.rounds):
            names = list(servers) if round_index % 2 == 0 else list(servers)[::-1]
            for label, payload, concurrency, window_s in workloads:
                for name in names:
                    server = servers[name]
                    result, cpu_us = load_with_server_cpu(
                        server.grpc_address, payload, server.pid, concurrency=concurrency, window_s=window_s
                    )
                    rows.append(
                        {
                            "round": round_index,
                            "workload": label,
                            "tree": name,
                            "requests_per_s": result.requests_per_s,
                            "server_cpu_us_per_request": cpu_us,
                        }
                    )
                    print(
                        f"round {round_index} {label:16s} {name:8s} {result.requests_per_s:9.1f} req/s "
                        f"{cpu_us:8.0f} server CPU µs/req  load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
    finally:
        for server in servers.values():
            server.stop()
    summary: dict[str, dict[str, float]] = {}
    for label, *_ in workloads:
        for name in trees:
            mine = [r for r in rows if r["workload"] == label and r["tree"] == name]
            rate = statistics.median(float(r["requests_per_s"]) for r in mine)
            cpu = statistics.median(float(r["server_cpu_us_per_request"]) for r in mine)
            summary[f"{label} {name}"] = {"requests_per_s": rate, "server_cpu_us_per_request": cpu}
            print(f"{label:16s} {name:8s} median {rate:9.1f} req/s  {cpu:8.0f} server CPU µs/req")
    print(f"saved {save('server_ab', {'trees': trees, 'rows': rows, 'summary': summary})}")


if __name__ == "__main__":
    main()
