"""FACILE batch 16000, 2 in flight (issue 37): ``sonic serve`` from one or more trees against the same
onnxruntime session called in this process ("direct"), in paired, alternating rounds.

The workload is ``benchmarks.compare``'s own (``facile_b16000``: its inputs, its model config, its load
generator, grpc.aio with a pre-serialized ModelInferRequest, and 2 intra-op threads for every session), so
the figures compare with its table. Per window: requests/s, the server's CPU per request split by thread
(the event loop's thread, where the request is received, decoded, and its answer encoded and sent; the
other threads: instance threads and onnxruntime's pool), and the load generator's CPU per request; per
round, the direct ceiling (CPU of this process over its window).

    .venv/bin/python -m benchmarks.facile_big --tree now=src --tree base=/tmp/old/src --rounds 6
    .venv/bin/python -m benchmarks.facile_big --tree on=src --tree off=src --server-args "off=--inline-execution-us 0"
    .venv/bin/python -m benchmarks.facile_big --tree two=src --tree one=src --instances one=1 \
        --server-args "one=--backend-config onnxruntime,intra_op_spinning=0"
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from tritonclient.utils import np_to_triton_dtype

from benchmarks.compare.measure import direct_run, sessions_for
from benchmarks.compare.workloads import THREADS, WORKLOADS, make_inputs
from benchmarks.harness.load import grpc_load, infer_request_bytes
from benchmarks.harness.processes import cpu_seconds, steady_malloc, thread_cpu_seconds
from benchmarks.harness.ratios import paired_ratios, per_server
from benchmarks.harness.report import machine, save
from benchmarks.harness.rounds import visits
from benchmarks.harness.servers import ServerSet, parse_named, set_cpu_instances
from sonic.launch import ServerProcess
from sonic.models.build import build_model
from sonic.models.zoo import registry

WORKLOAD = next(w for w in WORKLOADS if w.key == "facile_b16000")


def facile_repository(instances: int) -> Path:
    """A repository holding FACILE as benchmarks.compare builds it; ``instances`` > 0: that many CPU instances."""
    repository = Path(tempfile.mkdtemp(prefix="sonic-facile-"))
    build_model(registry()["facile"], repository)
    if instances:
        set_cpu_instances(repository, "facile", instances)
    return repository


def served_window(address: str, pid: int, payload: bytes, window_s: float) -> dict[str, Any]:
    """One window of the benchmark's load after 1 s of warm-up load, and what it cost, per request."""

    window = partial(grpc_load, address, payload, concurrency=WORKLOAD.concurrency, batch=WORKLOAD.batch)

    def load(seconds: float) -> Any:
        return asyncio.run(window(duration_s=seconds, warmup_s=0.0, transport="grpcio"))

    load(1.0)
    threads_before, client_before = thread_cpu_seconds(pid), time.process_time()
    total_before = cpu_seconds(pid)
    result = load(window_s)
    client_s = time.process_time() - client_before
    total_s = cpu_seconds(pid) - total_before
    threads_after = thread_cpu_seconds(pid)
    spent = {tid: threads_after[tid] - threads_before.get(tid, 0.0) for tid in threads_after}
    per_request = 1e6 / max(result.requests, 1)
    others = sorted((s for tid, s in spent.items() if tid != pid), reverse=True)
    return {
        "requests_per_s": result.requests_per_s,
        "inferences_per_s": result.inferences_per_s,
        "p50_ms": result.p50_ms,
        "server_cpu_us_per_request": total_s * per_request,
        "loop_thread_us_per_request": spent.get(pid, 0.0) * per_request,
        "other_threads_us_per_request": sum(others) * per_request,
        "busiest_other_threads_us_per_request": [round(s * per_request) for s in others[:4]],
        "client_cpu_us_per_request": client_s * per_request,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a src/ folder")
    parser.add_argument(
        "--server-args", action="append", default=[], help="NAME=ARGS: more sonic serve arguments"
    )
    parser.add_argument(
        "--instances",
        action="append",
        default=[],
        help="NAME=COUNT: the model's CPU instances (default: sonic's, 2)",
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--window-s", type=float, default=3.0)
    parser.add_argument("--no-direct", action="store_true", help="skip the direct ceiling")
    parser.add_argument("--tag", default="", help="results go to results/facile_big-TAG.json")
    args = parser.parse_args()
    steady_malloc()  # as benchmarks.compare: this process is the load generator
    trees = parse_named(args.tree, "--tree")
    more = parse_named(args.server_args, "--server-args")
    counts = {name: int(count) for name, count in parse_named(args.instances, "--instances").items()}
    models = registry()
    repositories = {count: facile_repository(count) for count in {counts.get(name, 0) for name in trees}}
    repository = repositories[0] if 0 in repositories else next(iter(repositories.values()))
    feeds = make_inputs(WORKLOAD, models)
    datatypes = {name: np_to_triton_dtype(array.dtype) for name, array in feeds.items()}
    payload = infer_request_bytes(WORKLOAD.model, feeds, datatypes)
    session = sessions_for([WORKLOAD], repository)[WORKLOAD.model]
    names = [*trees, *([] if args.no_direct else ["direct"])]
    rows: list[dict[str, Any]] = []
    with ServerSet() as servers:
        for name, src in trees.items():
            env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
            extra = [
                "--backend-config",
                f"onnxruntime,intra_op_thread_count={THREADS}",
                *shlex.split(more.get(name, "")),
            ]
            served = repositories[counts.get(name, 0)]
            servers.add(name, ServerProcess.start([served], env=env, extra_args=extra))
        for visit in visits(args.rounds, [WORKLOAD], names, how="alternate"):
            name = visit.server
            if name == "direct":
                before = time.process_time()
                result: dict[str, Any] = direct_run(session, feeds, WORKLOAD.batch, args.window_s, 1.0)
                result["cpu_us_per_request"] = 1e6 * (time.process_time() - before) / result["requests"]
            else:
                server = servers[name]
                result = served_window(server.grpc_address, server.pid, payload, args.window_s)
            row = {"round": visit.round, "tree": name, **result, "load_average": os.getloadavg()[0]}
            rows.append(row)
            shown = {
                k: round(v) if isinstance(v, float) else v
                for k, v in result.items()
                if k != "inferences_per_s"
            }
            print(f"round {visit.round} {name:10s} {shown}  load {row['load_average']:.1f}", flush=True)
    summary: dict[str, Any] = {}
    served_keys = (
        "requests_per_s",
        "server_cpu_us_per_request",
        "loop_thread_us_per_request",
        "other_threads_us_per_request",
        "client_cpu_us_per_request",
    )
    for key in served_keys:
        spreads = per_server([r for r in rows if key in r], key, who="tree")
        summary[key] = {name: spread.as_dict(digits=1) for name, spread in spreads.items()}
        print(f"{key:32s} " + "  ".join(f"{n} {s.text('.0f')}" for n, s in spreads.items()))
    first = next(iter(trees))
    ratios: dict[str, Any] = {}
    for name in names:
        if name == first:
            continue
        for key in ("requests_per_s", "server_cpu_us_per_request"):
            if name == "direct" and key != "requests_per_s":
                continue
            measured = [r for r in rows if key in r]
            if (ratio := paired_ratios(measured, key, first, name, who="tree")) is not None:
                ratios[f"{first}/{name} {key}"] = ratio.as_dict(digits=3)
                print(f"{first}/{name} {key} per round {ratio.text()}")
    if "direct" in names:
        for name in trees:
            if (ratio := paired_ratios(rows, "requests_per_s", name, "direct", who="tree")) is not None:
                ratios[f"{name}/direct requests_per_s"] = ratio.as_dict(digits=3)
                print(f"{name}/direct requests_per_s per round {ratio.text()}")
    results = {
        "machine": machine(),
        "workload": vars(WORKLOAD),
        "trees": trees,
        "server_args": more,
        "instances": counts,
        "rows": rows,
        "summary": summary,
        "ratios": ratios,
    }
    tag = f"-{args.tag}" if args.tag else ""
    print(f"saved {save('facile_big' + tag, results)}")


if __name__ == "__main__":
    main()
