"""Comparisons (issue 5 part 4): sonic serve, NVIDIA Triton, Seldon MLServer and direct onnxruntime, in one run.

Same machine, same workloads, same load generator for every server:

- compute-bound: EmTrkMichelId batch 1693, FACILE batch 16000, ResNet top tagger batch 10
  (2 requests in flight, so a server always has the next request while it computes);
- request-rate-bound: DeepCalo-like batch 10, FACILE batch 100, identity batch 1 (32 in flight);
- transfer: identity on 1693 x 48 x 48 x 1 FP32 (15.6 MB each way), one request in flight: MB/s of
  request tensor.

Servers, each its own process, all started once and left running for the whole run:

- ``sonic``: ``sonic serve`` as installed (native HTTP/2 gRPC frontend, uvloop); ``sonic-grpcio``: the same
  with ``--grpc-server grpcio``, grpcio's asyncio server, for reference (every
  workload but the compute-bound ones, where the gRPC stack does not matter);
- ``triton``: ``tritonserver`` 2.51 from nvidia-pytriton, Python backend running an onnxruntime session
  (``templates/triton_onnx_model.py``: requests of one dynamic batch are concatenated into one
  ``session.run``);
- ``mlserver``: Seldon MLServer in its own virtualenv (created on demand under benchmarks/results/raw),
  a custom runtime with the same onnxruntime session (``templates/compare_runtime.py``), adaptive
  batching, ``parallel_workers`` 0;
- ``direct``: the same onnxruntime session in this process, ``session.run`` back to back (the ceiling).

Every onnxruntime session has 2 intra-op threads and all graph optimisations. Load: the lean grpc.aio
generator of ``sonic perf`` (``--transport grpcio``: pre-serialized ModelInferRequest over grpc.aio) for
every workload; for identity batch 1 also the official ``tritonclient.grpc.aio`` (one InferInput built per
call); for identity batch 1 and the 15.6 MB tensors also ``sonic perf``'s native HTTP/2 load generator (its
default, a lighter client: no targets, it shows how much the load generator decides); for FACILE b16000 and
the 15.6 MB tensors also the lean generator with every tensor in system shared memory (``sonic perf
--shared-memory system``'s code: regions registered with each server per window, given back after; sonic,
Triton and direct only, MLServer has no shared memory). Server, load generator and
direct runs share the machine's 2 cores (no pinning). Each round visits every (workload, server) pair,
the server order rotating between rounds; ratios are taken within a round, medians over rounds.

    .venv/bin/python -m benchmarks.compare [--rounds 3] [--window-s 3] [--quick] [--replot]
        [--only KEY ...] [--servers sonic triton ...]

Writes benchmarks/results/compare.json, docs/compare.png, and the generated table of docs/benchmarks.md
(between the ``compare:table`` markers of its "Comparisons" section). Modules: ``workloads`` (what is
measured), ``repositories`` (the three model repositories, from ``templates/``), ``servers`` (starting
them), ``measure`` (windows and rounds), ``summary`` (medians, paired ratios, targets, the table),
``plot``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.compare.measure import run
from benchmarks.compare.plot import plot
from benchmarks.compare.repositories import RAW
from benchmarks.compare.servers import NAMES
from benchmarks.compare.summary import (
    CPU_TABLE_END,
    CPU_TABLE_START,
    TABLE_END,
    TABLE_START,
    cpu_table,
    summarize,
    table,
)
from benchmarks.harness.processes import steady_malloc
from benchmarks.harness.report import RESULTS, machine, replace_between, save

DOCS = Path(__file__).resolve().parents[2] / "docs"


def publish(result: dict[str, Any]) -> None:
    lines = table(result["summary"])
    plot(result["summary"], DOCS / "compare.png")
    print(f"saved {DOCS / 'compare.png'}")
    cpu_lines = cpu_table(result["summary"], result.get("memcpy_floor_ms", {}))
    for start, end, rows in ((TABLE_START, TABLE_END, lines), (CPU_TABLE_START, CPU_TABLE_END, cpu_lines)):
        if replace_between(DOCS / "benchmarks.md", start, end, rows):
            print(f"updated {start.split()[1]} in docs/benchmarks.md")
        else:
            print(f"docs/benchmarks.md has no {start!r} marker: table not written", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--window-s", type=float, default=3.0, help="measurement window (doubled for slow models)"
    )
    parser.add_argument("--only", nargs="*", help="workload keys (default: all)")
    parser.add_argument(
        "--servers",
        nargs="+",
        choices=NAMES,
        default=list(NAMES),
        help="servers to start (default: all); a run with fewer is saved as compare_quick",
    )
    parser.add_argument(
        "--quick", action="store_true", help="1 round of 1.5 s windows: a smoke run, not for the record"
    )
    parser.add_argument(
        "--replot", action="store_true", help="redo the table, docs and plot from compare.json, no measuring"
    )
    args = parser.parse_args()
    steady_malloc()  # this process is the load generator: see benchmarks.harness.processes.steady_malloc
    if args.replot:
        result = json.loads((RESULTS / "compare.json").read_text())
        result["summary"] = summarize(result)
        publish(result)
        return
    rounds, window_s = (1, 1.5) if args.quick else (args.rounds, args.window_s)
    RAW.mkdir(parents=True, exist_ok=True)
    result = run(rounds, window_s, set(args.only) if args.only else None, args.servers)
    result["machine"] = {**machine(), "load_average_at_end": os.getloadavg()}
    result["summary"] = summarize(result)
    print("\n".join(table(result["summary"])))
    print("\n".join(cpu_table(result["summary"], result["memcpy_floor_ms"])))
    if args.quick or args.only or set(args.servers) != set(NAMES):
        print(f"saved {save('compare_quick', result)} (docs and plot are left as they are)")
        return
    print(f"saved {save('compare', result)}")
    publish(result)


if __name__ == "__main__":
    main()
