"""Reference models: direct in-process onnxruntime vs served through ``sonic serve`` at concurrency 8.

For each ONNX reference model, at its seed batch size:

- direct: one onnxruntime session in this process (the options ``sonic serve`` uses: all graph
  optimisations, onnxruntime's default thread count), requests one after another;
- served: ``sonic serve`` on loopback with the model's own config (dynamic batching on), loaded
  by 8 client threads, each with its own tritonclient.grpc connection, each sending the same
  seed-batch request back to back.

Throughput is samples (batch rows) per second. The two are measured alternately, ``--repeats``
times per model in one run, and the ratio served/direct is taken per pair, so slow drifts of a
shared machine cancel; the median ratio is reported with its spread. Prints a table and writes
``benchmarks/results/reference_models.json``.

    ./dev bench reference_models [--models NAME ...] [--seconds 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from benchmarks.harness.ratios import spread
from benchmarks.harness.report import machine
from sonic.launch import ServerProcess
from sonic.models.build import build_repository
from sonic.models.zoo import ReferenceModel, registry

ROOT = Path(__file__).resolve().parent
CONCURRENCY = 8


def measure_direct(
    model: ReferenceModel, path: Path, inputs: dict[str, Any], seconds: float
) -> dict[str, float]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    outputs = list(model.output_names)
    session.run(outputs, inputs)  # warm-up: first run allocates
    latencies: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or len(latencies) < 3:
        begin = time.perf_counter()
        session.run(outputs, inputs)
        latencies.append(time.perf_counter() - begin)
    elapsed = time.perf_counter() - start
    return {
        "throughput": len(latencies) * model.seed_batch_size / elapsed,
        "batch_ms": 1e3 * statistics.median(latencies),
        "requests": len(latencies),
    }


def measure_served(
    model: ReferenceModel, address: str, inputs: dict[str, Any], seconds: float, burst_s: float
) -> dict[str, float]:
    """Rows per second through the server, from the completion times of the requests.

    The rate is taken between the first and the last completion in the window, counting only
    requests completed after the first burst: with one model instance, the executions that end
    in that interval ran entirely inside it. Counting completions over the whole window instead
    loses the execution in flight at its end, which for a model that merges 8 requests of
    0.5 s into one execution is a large part of a window of a few seconds. ``burst_s``: how far
    apart the responses of one execution may arrive.
    """
    completions: list[list[float]] = [[] for _ in range(CONCURRENCY)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(CONCURRENCY + 1)
    stop = threading.Event()

    def worker(index: int) -> None:
        client = grpcclient.InferenceServerClient(address)
        try:
            request = []
            for name in model.input_names:
                array = inputs[name]
                tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
                tensor.set_data_from_numpy(array)
                request.append(tensor)
            client.infer(model.name, request)  # warm-up, outside the window
            barrier.wait()
            while not stop.is_set():
                client.infer(model.name, request)
                completions[index].append(time.perf_counter())
        except BaseException as exc:  # noqa: BLE001  (reported after the run)
            errors.append(exc)
            barrier.abort()
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(CONCURRENCY)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    stop.wait(seconds)
    end = time.perf_counter()
    stop.set()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    times = sorted(t for per_thread in completions for t in per_thread if t <= end)
    if len(times) < 2:
        raise RuntimeError(f"{model.name}: fewer than 2 requests completed in a {seconds:.1f} s window")
    counted = [t for t in times if t > times[0] + burst_s]
    if not counted:
        raise RuntimeError(f"{model.name}: one execution filled the {seconds:.1f} s window; lengthen it")
    interval = counted[-1] - times[0]
    return {
        "throughput": len(counted) * model.seed_batch_size / interval,
        "requests": len(times),
        "interval_s": interval,
        "window_s": end - start,
    }


def server_stats(address: str, name: str) -> dict[str, float]:
    """Cumulative counters of the server: rows, executions, and model compute time (s)."""
    client = grpcclient.InferenceServerClient(address)
    try:
        stats = client.get_inference_statistics(name).model_stats[0]
    finally:
        client.close()
    return {
        "rows": float(stats.inference_count),
        "executions": float(stats.execution_count),
        "compute_s": sum(b.compute_infer.ns for b in stats.batch_stats) / 1e9,
    }


def window_seconds(model: ReferenceModel, path: Path, inputs: dict[str, Any], minimum_s: float) -> float:
    """A window long enough for at least 8 direct batches, so slow models are not measured on 3."""
    probe = measure_direct(model, path, inputs, 0.0)
    return max(minimum_s, 8 * probe["batch_ms"] / 1e3)


def main() -> None:
    onnx_models = [name for name, model in registry().items() if model.is_onnx]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=onnx_models, choices=onnx_models)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each measuring window")
    parser.add_argument("--repeats", type=int, default=3, help="direct/served pairs per model")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "reference_models.json")
    args = parser.parse_args()

    load_before = os.getloadavg()
    repository = ROOT / "results" / "raw" / "model_repository"
    build_repository(repository, args.models)
    results = []
    with ServerProcess.start([repository], extra_args=[]) as server:
        print(f"sonic serve at {server.grpc_address}; {CONCURRENCY} client threads; {os.cpu_count()} CPUs")
        header = f"{'model':16s} {'batch':>6s} {'batch ms':>9s} {'direct/s':>10s} {'served/s':>10s} {'ratio':>6s}  ratios"
        print(header, flush=True)
        for name in args.models:
            model = registry()[name]
            inputs = model.make_inputs(model.seed_batch_size, np.random.default_rng(0))
            path = repository / name / "1" / model.filename
            seconds = window_seconds(model, path, inputs, args.seconds)
            pairs = []
            served_s = 0.0
            before = server_stats(server.grpc_address, name)
            for _ in range(args.repeats):
                direct = measure_direct(model, path, inputs, seconds)
                start = time.perf_counter()
                # The next execution's responses cannot come sooner than about one seed batch's
                # compute after the previous ones: half of it separates bursts safely.
                burst_s = 0.5 * direct["batch_ms"] / 1e3
                served = measure_served(model, server.grpc_address, inputs, seconds, burst_s)
                served_s += time.perf_counter() - start  # includes the drain after the window
                pairs.append((direct, served))
            after = server_stats(server.grpc_address, name)
            ratios = [s["throughput"] / d["throughput"] for d, s in pairs]
            delta = {key: after[key] - before[key] for key in after}
            direct_ms = spread(d["batch_ms"] for d, _ in pairs).median
            record = {
                "model": name,
                "seed_batch_size": model.seed_batch_size,
                "window_s": seconds,
                "direct_batch_ms": direct_ms,
                "direct_throughput": spread(d["throughput"] for d, _ in pairs).median,
                "served_throughput": spread(s["throughput"] for _, s in pairs).median,
                "ratio_median": spread(ratios).median,
                "ratios": ratios,
                # Diagnostics. Rows per execution above the seed batch: dynamic batching merged
                # requests. Compute per row, server vs direct: the model itself ran slower in the
                # server (CPU shared with the clients). Busy fraction below 1: the model waited
                # for requests (protocol and client overhead).
                "served_rows_per_execution": delta["rows"] / max(delta["executions"], 1.0),
                "direct_compute_us_per_row": 1e3 * direct_ms / model.seed_batch_size,
                "served_compute_us_per_row": 1e6 * delta["compute_s"] / max(delta["rows"], 1.0),
                "served_busy_fraction": delta["compute_s"] / served_s,
            }
            results.append(record)
            print(
                f"{name:16s} {model.seed_batch_size:6d} {record['direct_batch_ms']:9.2f} "
                f"{record['direct_throughput']:10.1f} {record['served_throughput']:10.1f} "
                f"{record['ratio_median']:6.2f}  {' '.join(f'{r:.2f}' for r in ratios)}"
                f"  rows/exec {record['served_rows_per_execution']:.1f}, us/row direct "
                f"{record['direct_compute_us_per_row']:.1f} served {record['served_compute_us_per_row']:.1f}, "
                f"busy {record['served_busy_fraction']:.2f}",
                flush=True,
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "reference_models",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {**machine(), "onnxruntime": ort.__version__},
        # The machine is shared: its 1-minute load average before and after says how much.
        "load_average_1m": {"before": load_before[0], "after": os.getloadavg()[0]},
        "concurrency": CONCURRENCY,
        "seconds_per_window": args.seconds,
        "repeats": args.repeats,
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
