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
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

from benchmarks.harness.processes import tree_cpu_seconds
from benchmarks.harness.ratios import per_server
from benchmarks.harness.report import machine, save
from benchmarks.harness.rounds import visits
from benchmarks.harness.servers import ServerSet
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
    rows: list[dict[str, float | int | str]] = []
    with ServerSet() as servers:
        servers.add("sonic", ServerProcess.start([repo]))
        servers.add("triton", TritonProcess.start([repo], models=["square_int32"]))
        for address in servers.addresses().values():  # warm-up: first imports, first thread
            one_stream(address, 100)
        for visit in visits(args.rounds, ["stream"], list(servers), how="alternate"):
            server = servers[visit.server]
            before = tree_cpu_seconds(server.pid)
            rate = one_stream(server.grpc_address, args.responses)
            cpu_us = (tree_cpu_seconds(server.pid) - before) / args.responses * 1e6
            rows.append({"round": visit.round, "server": visit.server, "rate": rate, "cpu_us": cpu_us})
            print(
                f"round {visit.round + 1} {visit.server:6s} {rate:8.0f} responses/s {cpu_us:6.0f} server CPU us/response",
                flush=True,
            )
    rates, cpu = per_server(rows, "rate"), per_server(rows, "cpu_us")
    for name, value in rates.items():
        print(
            f"median {name:6s} {value.median:8.0f} responses/s {cpu[name].median:6.0f} server CPU us/response "
            f"over {args.rounds} rounds"
        )
    print(f"sonic/triton rate {rates['sonic'].median / rates['triton'].median:.2f}")
    print(f"sonic/triton CPU per response {cpu['sonic'].median / cpu['triton'].median:.2f}")
    path = save(
        "decoupled_stream",
        {
            "machine": machine(),
            "responses_per_request": args.responses,
            "rounds": {name: list(f.values) for name, f in rates.items()},
            "medians": {name: f.median for name, f in rates.items()},
            "server_cpu_us_per_response": {name: list(f.values) for name, f in cpu.items()},
            "server_cpu_us_per_response_medians": {name: f.median for name, f in cpu.items()},
        },
    )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
