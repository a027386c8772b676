"""Decoupled responses per second on one ModelStreamInfer stream: sonic against real Triton 2.51.

The model is NVIDIA's ``square_int32`` example (tests/integration/backends/python_models/): a request
IN = n gets n responses, sent from a thread of the model, then the final flag (asked back as an empty
final response, so the client sees the end). Both servers run the same model folder and are started
once; each round times one request of ``--responses`` responses on a fresh stream on each server, in
alternating order, and prints responses per second and the server's CPU time per response (its
processes together: Triton's Python stub included), a figure a busy machine changes less than the rate;
the end gives the medians and their ratios.

    .venv/bin/python -m benchmarks.decoupled_stream [--rounds 5] [--responses 2000]

Figures are saved to benchmarks/results/decoupled_stream.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

from benchmarks.harness.processes import cpu_seconds
from benchmarks.harness.report import machine, save
from sonic.launch import ServerProcess
from sonic.launch.triton import TritonProcess

MODEL = (
    Path(__file__).parent.parent / "tests" / "integration" / "backends" / "python_models" / "square_int32.py"
)
CONFIG = """name: "square_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def repository() -> Path:
    repo = Path(tempfile.mkdtemp(prefix="sonic-decoupled-bench-")) / "models"
    (repo / "square_int32" / "1").mkdir(parents=True)
    (repo / "square_int32" / "config.pbtxt").write_text(CONFIG)
    (repo / "square_int32" / "1" / "model.py").write_bytes(MODEL.read_bytes())
    return repo


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and of its descendants (Triton's Python backend stubs)."""
    total = cpu_seconds(pid)
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in children.read_text().split():
            total += tree_cpu_seconds(int(child))
    return total


def one_stream(address: str, responses: int) -> float:
    """Responses per second of one request on a fresh stream, from sending it to its final response."""
    request = service_pb2.ModelInferRequest(model_name="square_int32", id="bench")
    request.inputs.add(name="IN", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([responses], np.int32).tobytes())
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    with grpc.insecure_channel(address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=30)  # connected before the clock starts
        started = time.perf_counter()
        count = 0
        for message in stub.ModelStreamInfer(iter([request]), timeout=300):
            if message.error_message:
                raise RuntimeError(message.error_message)
            count += 1
        elapsed = time.perf_counter() - started
    if count != responses + 1:
        raise RuntimeError(f"expected {responses} responses and the final one, got {count}")
    return responses / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--responses", type=int, default=2000)
    args = parser.parse_args()
    repo = repository()
    # Triton's Python stub runs the interpreter on PATH: this one, with numpy and the pb_utils module.
    os.environ["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    rates: dict[str, list[float]] = {"sonic": [], "triton": []}
    cpu_us: dict[str, list[float]] = {"sonic": [], "triton": []}
    with (
        ServerProcess.start([repo]) as sonic,
        TritonProcess.start([repo], models=["square_int32"]) as triton,
    ):
        addresses = {"sonic": sonic.grpc_address, "triton": triton.addresses["grpc"]}
        pids = {"sonic": sonic.process.pid, "triton": triton.process.pid}
        for address in addresses.values():  # warm-up: first imports, first thread
            one_stream(address, 100)
        for index in range(args.rounds):
            order = list(addresses) if index % 2 == 0 else list(reversed(addresses))
            for name in order:
                before = tree_cpu_seconds(pids[name])
                rates[name].append(one_stream(addresses[name], args.responses))
                cpu_us[name].append((tree_cpu_seconds(pids[name]) - before) / args.responses * 1e6)
                print(
                    f"round {index + 1} {name:6s} {rates[name][-1]:8.0f} responses/s "
                    f"{cpu_us[name][-1]:6.0f} server CPU us/response",
                    flush=True,
                )
    medians = {name: statistics.median(values) for name, values in rates.items()}
    cpu_medians = {name: statistics.median(values) for name, values in cpu_us.items()}
    for name, value in medians.items():
        print(
            f"median {name:6s} {value:8.0f} responses/s {cpu_medians[name]:6.0f} server CPU us/response "
            f"over {args.rounds} rounds"
        )
    print(f"sonic/triton rate {medians['sonic'] / medians['triton']:.2f}")
    print(f"sonic/triton CPU per response {cpu_medians['sonic'] / cpu_medians['triton']:.2f}")
    path = save(
        "decoupled_stream",
        {
            "machine": machine(),
            "responses_per_request": args.responses,
            "rounds": rates,
            "medians": medians,
            "server_cpu_us_per_response": cpu_us,
            "server_cpu_us_per_response_medians": cpu_medians,
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
