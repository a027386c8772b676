"""``sonic demo``: build a sample model repository, serve it, and run inference through the service."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from sonic.launch import ServerProcess
from sonic.models.simple import write_sample_repository


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("demo", help="serve a sample repository and infer through the service")
    parser.add_argument("--out", type=Path, default=None, help="where to write the model repository")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import tritonclient.grpc as grpcclient  # noqa: PLC0415  (the official client, as users would use it)

    with tempfile.TemporaryDirectory(prefix="sonic-demo-") as scratch:
        repository = write_sample_repository(args.out or Path(scratch) / "model_repository")
        print(f"model repository: {repository}")
        with ServerProcess.start([repository]) as server:
            print(f"server ready at {server.grpc_address} (pid {server.pid})")
            client = grpcclient.InferenceServerClient(server.grpc_address)
            a = np.arange(16, dtype=np.int32).reshape(1, 16)
            b = np.ones((1, 16), dtype=np.int32)
            inputs = [
                grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
                grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            result = client.infer("add_sub", inputs)
            total, difference = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
            assert total is not None
            assert difference is not None
            print(f"add_sub: INPUT0 + INPUT1 = {total.tolist()[0]}")
            print(f"add_sub: INPUT0 - INPUT1 = {difference.tolist()[0]}")
            ok = np.array_equal(total, a + b) and np.array_equal(difference, a - b)
            stats = client.get_inference_statistics("add_sub").model_stats[0]
            print(
                f"server statistics: {stats.inference_count} inference(s), {stats.execution_count} execution(s)"
            )
            client.close()
    print("demo: OK" if ok else "demo: WRONG RESULT")
    return 0 if ok else 1
