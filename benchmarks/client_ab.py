"""Paired A/B of the load generator itself (``sonic perf``'s engine and ``sonic.client``'s HTTP/2) from two or
more source trees, against one ``sonic serve``: 15.6 MB tensors (1693 x 48 x 48 x 1 FP32) at 1 in flight.

Each window runs in a process of its own, with ``PYTHONPATH`` set to a tree's ``src`` (so its engine, client
and compiled modules are the ones measured) and on the loop named (``asyncio`` or ``uvloop``); the server
stays the same. Per window: MB/s, the load process's CPU per request and the server's. Rounds visit every
variant, the order reversed every other round, so each round gives a ratio.

    .venv/bin/python -m benchmarks.client_ab --variant base=/tmp/base/src:asyncio \
        --variant after=src:asyncio --variant after-uvloop=src:uvloop [--rounds 4] [--tag NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.compare.workloads import LARGE_SHAPE
from benchmarks.harness.processes import cpu_seconds
from benchmarks.harness.ratios import paired_ratios, per_server
from benchmarks.harness.report import machine, save
from benchmarks.harness.rounds import visits
from sonic.launch import ServerProcess
from sonic.testing.repository import MODELS, write_test_repository

REPO_ROOT = Path(__file__).resolve().parent.parent


def window(address: str, window_s: float, loop: str) -> dict[str, float]:
    """In the window's own process: 1 s of warm-up load, then ``window_s`` measured; this process's CPU."""
    from benchmarks.harness.load import grpc_load, infer_request_bytes  # noqa: PLC0415  (the tree's sonic)
    from benchmarks.harness.processes import steady_malloc  # noqa: PLC0415

    steady_malloc()
    array = np.random.default_rng(0).random(LARGE_SHAPE, dtype=np.float32)
    payload = infer_request_bytes("identity_large", {"INPUT0": array}, {"INPUT0": "FP32"})
    factory = None
    if loop == "uvloop":
        import uvloop  # noqa: PLC0415  (not sonic.cli.event_loop: the trees measured may predate it)

        factory = uvloop.new_event_loop

    def load(seconds: float) -> Any:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(
                grpc_load(address, payload, concurrency=1, batch=LARGE_SHAPE[0], duration_s=seconds, warmup_s=0.0, transport="h2")
            )  # fmt: skip

    load(1.0)
    before = time.process_time()
    result = load(window_s)
    return {
        "requests": result.requests,
        "requests_per_s": result.requests_per_s,
        "MB_per_s": result.requests_per_s * array.nbytes / 1e6,
        "client_cpu_ms_per_request": 1e3 * (time.process_time() - before) / max(result.requests, 1),
    }


def run_window(src: str, loop: str, address: str, window_s: float) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(src).resolve()), str(REPO_ROOT)])}
    code = f"import json, benchmarks.client_ab as m; print(json.dumps(m.window({address!r}, {window_s}, {loop!r})))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--variant", action="append", required=True, help="NAME=SRC:LOOP (LOOP: asyncio or uvloop)"
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--window-s", type=float, default=4.0)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    variants: dict[str, tuple[str, str]] = {}
    for item in args.variant:
        name, _, rest = item.partition("=")
        src, _, loop = rest.rpartition(":")
        if not name or not src or loop not in {"asyncio", "uvloop"}:
            parser.error(f"--variant {item!r}: expected NAME=SRC:asyncio or NAME=SRC:uvloop")
        variants[name] = (src, loop)
    repository = Path(tempfile.mkdtemp(prefix="sonic-client-ab-"))
    write_test_repository(repository, "sonic", tuple(m for m in MODELS if m.name == "identity_large"))
    rows: list[dict[str, Any]] = []
    server = ServerProcess.start([repository])
    try:
        for visit in visits(args.rounds, ["large"], list(variants), how="alternate"):
            src, loop = variants[visit.server]
            server_before = cpu_seconds(server.pid)
            result = run_window(src, loop, server.grpc_address, args.window_s)
            # The server's CPU over the whole window process (warm-up included): the same for every variant.
            result["server_cpu_ms_per_request_incl_warmup"] = (
                1e3 * (cpu_seconds(server.pid) - server_before) / max(result["requests"], 1)
            )
            rows.append(
                {"round": visit.round, "variant": visit.server, **result, "load_average": os.getloadavg()[0]}
            )
            shown = {k: round(v, 2) for k, v in result.items()}
            print(f"round {visit.round} {visit.server:14s} {shown}", flush=True)
    finally:
        server.stop()
    summary: dict[str, Any] = {}
    for key in ("MB_per_s", "client_cpu_ms_per_request"):
        spreads = per_server(rows, key, who="variant")
        summary[key] = {name: s.as_dict(digits=2) for name, s in spreads.items()}
        print(f"{key:28s} " + "  ".join(f"{n} {s.text('.2f')}" for n, s in spreads.items()))
    first = next(iter(variants))
    ratios: dict[str, Any] = {}
    for name in list(variants)[1:]:
        for key in ("MB_per_s", "client_cpu_ms_per_request"):
            if (ratio := paired_ratios(rows, key, name, first, who="variant")) is not None:
                ratios[f"{name}/{first} {key}"] = ratio.as_dict(digits=3)
                print(f"{name}/{first} {key} per round {ratio.text()}")
    tag = f"-{args.tag}" if args.tag else ""
    results = {"machine": machine(), "variants": variants, "rows": rows, "summary": summary, "ratios": ratios}
    print(f"saved {save('client_ab' + tag, results)}")


if __name__ == "__main__":
    main()
