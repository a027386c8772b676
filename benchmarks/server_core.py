"""Server core benchmark (issue 2): sonic serve vs direct in-process onnxruntime, same thread count.

(a) ProtoDUNE EmTrkMichelId CNN, requests of batch 235 and 1693, concurrency 1, 8, 32: inferences/s,
    p50/p99 latency, and the server's peak RSS; (b) identity [-1, 16] with batch-1 requests: requests/s
    and the p50 overhead over a direct session.run. Server and load generator are separate processes;
    the load generator sends pre-serialized requests so it costs little CPU. Direct and served runs
    alternate within each repeat, so machine drift affects both sides of each ratio.

    .venv/bin/python benchmarks/server_core.py [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from benchmarks.harness.load import grpc_load, infer_request_bytes
from benchmarks.harness.processes import peak_rss_mb, steady_malloc
from benchmarks.harness.report import RESULTS, machine, save
from sonic.launch import ServerProcess
from sonic.models.build import build_model
from sonic.models.simple import identity_model
from sonic.models.zoo.emtrk import EMTRK_MICHEL

THREADS = 2
REPOSITORY = RESULTS / "raw" / "server_core_repository"

IDENTITY_CONFIG = """
name: "identity"
backend: "onnxruntime"
max_batch_size: 1024
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { }
"""


def build_repository() -> Path:
    build_model(EMTRK_MICHEL, REPOSITORY)
    identity = REPOSITORY / "identity"
    if not (identity / "1" / "model.onnx").exists():
        identity_model(identity / "1" / "model.onnx")
    (identity / "config.pbtxt").write_text(IDENTITY_CONFIG)
    return REPOSITORY


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def direct_throughput(
    sess: ort.InferenceSession, feeds: dict[str, npt.NDArray[Any]], batch: int, duration_s: float
) -> float:
    sess.run(None, feeds)  # warm-up: allocations for this shape
    count = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < duration_s:
        sess.run(None, feeds)
        count += 1
    return count * batch / elapsed


def direct_latency_ms(sess: ort.InferenceSession, feeds: dict[str, npt.NDArray[Any]], runs: int) -> float:
    for _ in range(100):
        sess.run(None, feeds)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(None, feeds)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def serve(repository: Path) -> ServerProcess:
    return ServerProcess.start(
        [repository], extra_args=["--backend-config", f"onnxruntime,intra_op_thread_count={THREADS}"]
    )


def run(repeats: int, quick: bool) -> dict[str, object]:
    repository = build_repository()
    emtrk_path = repository / "emtrk_michel" / "1" / "model.onnx"
    window_s, warmup_s = (4.0, 2.0) if quick else (10.0, 4.0)
    concurrencies = [1, 8, 32]
    rng = np.random.default_rng(0)
    rows: list[dict[str, object]] = []
    memory: dict[str, float] = {}
    for repeat in range(repeats):
        emtrk = session(emtrk_path)
        for batch in (235, 1693):
            feeds = EMTRK_MICHEL.make_inputs(batch, rng)
            direct = direct_throughput(emtrk, feeds, batch, window_s)
            payload = infer_request_bytes("emtrk_michel", feeds, {"main_input": "FP32"})
            with serve(repository) as server:
                for concurrency in concurrencies:
                    result = asyncio.run(
                        grpc_load(
                            server.grpc_address,
                            payload,
                            concurrency=concurrency,
                            batch=batch,
                            duration_s=window_s,
                            warmup_s=warmup_s,
                        )
                    )
                    rows.append(
                        {
                            "workload": f"emtrk_michel batch {batch}",
                            "repeat": repeat,
                            "direct_inferences_per_s": round(direct, 1),
                            "served_over_direct": round(result.inferences_per_s / direct, 3),
                            **vars(result),
                        }
                    )
                    print(
                        f"[{repeat}] emtrk b{batch} c{concurrency}: {result.inferences_per_s:8.0f} inf/s served, "
                        f"{direct:8.0f} direct ({result.inferences_per_s / direct:.2f}x), "
                        f"p50 {result.p50_ms:.0f} ms p99 {result.p99_ms:.0f} ms",
                        flush=True,
                    )
                rss = peak_rss_mb(server.pid)
                memory[f"batch {batch}"] = max(memory.get(f"batch {batch}", 0.0), rss)
                print(f"[{repeat}] emtrk b{batch}: server peak RSS {rss:.0f} MB", flush=True)
        del emtrk
        identity = session(repository / "identity" / "1" / "model.onnx")
        feeds = {"INPUT0": np.ones((1, 16), dtype=np.float32)}
        direct_ms = direct_latency_ms(identity, feeds, 2000)
        payload = infer_request_bytes("identity", feeds, {"INPUT0": "FP32"})
        with serve(repository) as server:
            for concurrency in concurrencies:
                result = asyncio.run(
                    grpc_load(
                        server.grpc_address,
                        payload,
                        concurrency=concurrency,
                        batch=1,
                        duration_s=window_s / 2,
                        warmup_s=1.0,
                    )
                )
                rows.append(
                    {
                        "workload": "identity batch 1",
                        "repeat": repeat,
                        "direct_p50_ms": round(direct_ms, 4),
                        "p50_overhead_ms": round(result.p50_ms - direct_ms, 3),
                        **vars(result),
                    }
                )
                print(
                    f"[{repeat}] identity c{concurrency}: {result.requests_per_s:8.0f} req/s, p50 {result.p50_ms:.3f} ms "
                    f"(direct session.run {direct_ms:.3f} ms)",
                    flush=True,
                )
    return {"threads": THREADS, "repeats": repeats, "window_s": window_s, "rows": rows, "peak_rss_mb": memory}


def summary(result: dict[str, object]) -> list[str]:
    rows = result["rows"]
    assert isinstance(rows, list)
    lines = [
        "| workload | concurrency | served inf/s (median) | direct inf/s | served/direct | req/s | p50 ms | p99 ms |"
    ]
    lines.append("|---|---|---|---|---|---|---|---|")
    keys = sorted({(r["workload"], r["concurrency"]) for r in rows}, key=lambda k: (str(k[0]), int(k[1])))
    for workload, concurrency in keys:
        group = [r for r in rows if r["workload"] == workload and r["concurrency"] == concurrency]

        def med(key: str, group: list[dict[str, object]] = group) -> float:
            return statistics.median(float(r[key]) for r in group if key in r)  # type: ignore[arg-type]

        direct = f"{med('direct_inferences_per_s'):.0f}" if "direct_inferences_per_s" in group[0] else "-"
        ratio = f"{med('served_over_direct'):.2f}" if "served_over_direct" in group[0] else "-"
        lines.append(
            f"| {workload} | {concurrency} | {med('inferences_per_s'):.0f} | {direct} | {ratio} | "
            f"{med('requests_per_s'):.0f} | {med('p50_ms'):.2f} | {med('p99_ms'):.2f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--quick", action="store_true", help="short windows (a smoke run, not for the record)"
    )
    args = parser.parse_args()
    steady_malloc()  # this process is the load generator: see benchmarks.harness.processes.steady_malloc
    result = run(args.repeats, args.quick)
    result["machine"] = machine()
    path = save("server_core", result)
    print("\n".join(summary(result)))
    print(f"peak server RSS: {result['peak_rss_mb']}")
    print(f"saved {path}")


if __name__ == "__main__":
    main()
