"""Served vs direct in-process throughput for a small model in each backend (concurrency 8).

For each backend the same model is run two ways, each by ``--concurrency`` threads for
``--seconds``:

- served: ``--concurrency`` closed-loop callers of the project's lean gRPC load generator
  (``benchmarks.harness.load.grpc_load``: pre-serialized requests of ``--rows`` rows) against
  ``sonic serve``, started here on a free loopback port with dynamic batching on;
- direct: every thread calls the framework itself in this process (TorchScript module, Python
  model's ``execute``, ``Booster.inplace_predict``, the ensemble's two steps one after the other).

PyTorch and XGBoost use one thread per call on both sides: eight callers already fill the cores,
and in the server their spinning OpenMP workers otherwise take the CPU the gRPC and batching
threads need (PyTorch: about 7x fewer requests/s on a 2-core machine).

Each point is the median of ``--repeats`` runs. Client threads, server and direct runs share
the machine's cores, so on a small or busy machine the served figures are bounded by the CPU
left to the server; the load average is printed with the table.

Usage: ``./dev bench backends [--seconds 3] [--concurrency 8] [--rows 8]
[--repeats 3]``. Prints a Markdown table and writes ``benchmarks/results/backends.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import statistics
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import xgboost

import triton_python_backend_utils as pb_utils
from benchmarks.harness.load import grpc_load, infer_request_bytes
from benchmarks.harness.report import machine, markdown_table, save
from sonic.launch import ServerProcess

FEATURES = 16
TEMPLATE_REPOSITORY = Path(__file__).resolve().parent / "templates" / "backends_repository"


def build(repo: Path) -> dict[str, Any]:
    # The configs and the Python model are files (templates/backends_repository); the rest is made here.
    shutil.copytree(TEMPLATE_REPOSITORY, repo, dirs_exist_ok=True)
    for name in ("mlp", "bdt", "chain"):  # version folders of what is made here (the ensemble's stays empty)
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4), torch.nn.Softmax(-1)
    ).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript: what pytorch_libtorch serves
        scripted = torch.jit.trace(mlp, torch.randn(2, FEATURES))  # type: ignore[no-untyped-call]
        torch.jit.save(scripted, str(repo / "mlp" / "1" / "model.pt"))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, FEATURES)).astype(np.float32)
    booster = xgboost.train(
        {"objective": "binary:logistic", "max_depth": 6, "nthread": 1},
        xgboost.DMatrix(x, label=(x[:, 0] + x[:, 1] * x[:, 2] > 0)),
        num_boost_round=100,
    )
    booster.save_model(str(repo / "bdt" / "1" / "xgboost.json"))
    spec = importlib.util.spec_from_file_location("bench_scale_model", repo / "scale" / "1" / "model.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"mlp": mlp, "booster": booster, "python_module": module}


def direct_calls(built: dict[str, Any]) -> dict[str, Callable[[], Callable[[npt.NDArray[Any]], object]]]:
    """Per backend: a factory giving each thread its own callable (Python models are per instance)."""

    def torch_call(x: npt.NDArray[Any]) -> object:
        with torch.inference_mode():
            return built["mlp"](torch.from_numpy(x)).numpy()

    def python_factory() -> Callable[[npt.NDArray[Any]], object]:
        model = built["python_module"].TritonPythonModel()

        def call(x: npt.NDArray[Any]) -> object:
            request = pb_utils.InferenceRequest("scale", [pb_utils.Tensor("RAW", x)], ["SCALED"])
            return model.execute([request])

        return call

    def chain_factory() -> Callable[[npt.NDArray[Any]], object]:
        scale = python_factory()

        def call(x: npt.NDArray[Any]) -> object:
            responses: Any = scale(x)
            (response,) = responses
            return torch_call(response.output_tensors()[0].as_numpy())

        return call

    return {
        "pytorch": lambda: torch_call,
        "python": python_factory,
        "trees": lambda: built["booster"].inplace_predict,
        "ensemble": chain_factory,
    }


SERVED = {"pytorch": ("mlp", "INPUT__0"), "python": ("scale", "RAW"), "trees": ("bdt", "input__0"),
          "ensemble": ("chain", "RAW")}  # fmt: skip


def run_threads(concurrency: int, seconds: float, make_worker: Callable[[], Callable[[], None]]) -> float:
    """Calls per second over ``concurrency`` threads, each running its own worker for ``seconds``."""
    counts = [0] * concurrency
    workers = [make_worker() for _ in range(concurrency)]
    for worker in workers:
        worker()  # warm-up outside the timed window
    start = threading.Barrier(concurrency + 1)
    deadline = [0.0]

    def loop(index: int) -> None:
        start.wait()
        work = workers[index]
        while time.perf_counter() < deadline[0]:
            work()
            counts[index] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    deadline[0] = time.perf_counter() + seconds
    begin = time.perf_counter()
    start.wait()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - begin)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rows", type=int, default=8, help="rows per request")
    parser.add_argument("--repeats", type=int, default=3, help="runs per point (the median is shown)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = np.random.default_rng(1).normal(size=(args.rows, FEATURES)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="sonic-bench-backends-") as tmp:
        repo = Path(tmp) / "models"
        built = build(repo)
        direct = {}
        for backend, factory in direct_calls(built).items():

            def make(
                factory: Callable[[], Callable[[npt.NDArray[Any]], object]] = factory,
            ) -> Callable[[], None]:
                call = factory()

                def work() -> None:
                    call(data)

                return work

            direct[backend] = statistics.median(
                run_threads(args.concurrency, args.seconds, make) for _ in range(args.repeats)
            )
        served = {}
        with ServerProcess.start([repo]) as server:
            for backend, (model, input_name) in SERVED.items():
                payload = infer_request_bytes(model, {input_name: data}, {input_name: "FP32"})
                runs = [
                    asyncio.run(
                        grpc_load(
                            server.grpc_address,
                            payload,
                            concurrency=args.concurrency,
                            batch=args.rows,
                            duration_s=args.seconds,
                            warmup_s=1.0,
                        )
                    ).requests_per_s
                    for _ in range(args.repeats)
                ]
                served[backend] = statistics.median(runs)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(
        f"concurrency {args.concurrency}, {args.rows} rows per request, median of {args.repeats} x "
        f"{args.seconds:.0f} s, {os.cpu_count()} CPUs, load average {load}\n"
    )
    header = ["backend", "model", "served req/s", "direct calls/s", "served / direct"]
    cells = [
        [b, model, f"{served[b]:,.0f}", f"{direct[b]:,.0f}", f"{served[b] / direct[b]:.2f}"]
        for b, (model, _) in SERVED.items()
    ]
    print("\n".join(markdown_table(header, cells, numeric_from=2)))
    settings = {k: getattr(args, k) for k in ("seconds", "concurrency", "rows", "repeats")}
    points = {
        b: {"model": SERVED[b][0], "served_req_per_s": served[b], "direct_calls_per_s": direct[b]}
        for b in SERVED
    }
    path = save(
        "backends", {"machine": machine(), "load_average": os.getloadavg(), **settings, "points": points}
    )
    print(f"\nsaved {path}")


if __name__ == "__main__":
    main()
