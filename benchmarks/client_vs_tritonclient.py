"""sonic.client against NVIDIA's tritonclient: requests per second and the client's own cost per request.

One ``sonic serve`` (from ``--server-src``), or Triton 2.51 with ``--server triton``, with the test repository's ``identity`` model (FP32
[1, 16], no queue delay). Clients, each in its own process: every ``--tree`` (``NAME=PATH`` of a
``src/`` folder: its ``sonic.client``) and tritonclient from this environment; ``async`` mode runs 32
callers on ``AsyncClient`` / ``tritonclient.grpc.aio``, ``sync`` mode one caller on ``SyncClient`` /
``tritonclient.grpc``. Clients alternate ``--alternations`` times, ``--rounds`` rounds each; the
figures are medians of the rounds. On a shared machine req/s and CPU time swing with the other jobs,
so ``--instructions`` also counts each client's instructions per request under valgrind (runs of
``--valgrind-requests`` A and B requests, their difference divided by A - B: start-up cancels out),
a figure that does not depend on load.

Usage: ``python -m benchmarks.client_vs_tritonclient --tree base=/path/to/old/src --tree after=src
[--instructions]``. Writes ``benchmarks/results/client_vs_tritonclient.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness.ratios import spread
from benchmarks.harness.report import machine, save
from benchmarks.harness.servers import parse_named
from sonic.launch import ServerProcess
from sonic.launch.triton import TritonProcess
from sonic.testing.repository import write_test_repository

WORKER = Path(__file__).with_name("client_vs_tritonclient_worker.py")
TRITON = "tritonclient"


def _run(kind: str, src: str | None, address: str, rounds: int, requests: int, *, valgrind: bool) -> str:
    command = [sys.executable, str(WORKER), kind, address, str(rounds), str(requests)]
    if valgrind:
        command = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            *command,
        ]
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(Path(src).resolve())
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True, timeout=3600)
    return done.stderr if valgrind else done.stdout


def _instructions(kind: str, src: str | None, address: str, counts: tuple[int, int]) -> float:
    totals = []
    for requests in counts:
        match = re.search(r"I\s+refs:\s+([\d,]+)", _run(kind, src, address, 1, requests, valgrind=True))
        if match is None:
            raise RuntimeError("valgrind printed no instruction count")
        totals.append(int(match.group(1).replace(",", "")))
    return (totals[0] - totals[1]) / (counts[0] - counts[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", help="NAME=PATH of a src/ folder (sonic.client)")
    parser.add_argument("--server-src", default="src", help="the src/ folder the server runs from")
    parser.add_argument("--server", choices=("sonic", "triton"), default="sonic", help="which server answers")
    parser.add_argument("--modes", default="async,sync", help="async, sync or both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests-async", type=int, default=4000, help="per round, async mode")
    parser.add_argument("--requests-sync", type=int, default=1500, help="per round, sync mode")
    parser.add_argument("--alternations", type=int, default=3)
    parser.add_argument("--instructions", action="store_true", help="also count instructions (valgrind)")
    parser.add_argument("--save-as", default="client_vs_tritonclient", help="results file name")
    parser.add_argument("--valgrind-requests", default="1500,300", help="A,B requests of the two runs")
    args = parser.parse_args()
    trees: dict[str, str | None] = {**parse_named(args.tree or ["after=src"], "--tree")}
    if TRITON in trees:
        parser.error(f"'{TRITON}' names the tritonclient run: give the tree another name")
    clients = {**trees, TRITON: None}
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(modes) <= {"async", "sync"}:
        parser.error(f"--modes {args.modes!r}: expected async, sync or both")
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind")
    counts_given = tuple(int(c) for c in args.valgrind_requests.split(","))
    if len(counts_given) != 2 or counts_given[0] <= counts_given[1]:
        parser.error("--valgrind-requests: two counts A,B with A > B")
    counts = (counts_given[0], counts_given[1])
    repository = write_test_repository(Path(tempfile.mkdtemp(prefix="sonic-client-vs-triton-")), args.server)
    server_env = {**os.environ, "PYTHONPATH": str(Path(args.server_src).resolve())}
    starting = (
        ServerProcess.start([repository], env=server_env)
        if args.server == "sonic"
        else TritonProcess.start([repository], models=["identity"])
    )
    rounds: dict[str, dict[str, list[list[float]]]] = {m: {c: [] for c in clients} for m in modes}
    summary: dict[str, dict[str, dict[str, float]]] = {m: {} for m in modes}
    with starting as server:
        for _ in range(args.alternations):
            for mode in modes:
                requests = args.requests_async if mode == "async" else args.requests_sync
                for name, src in clients.items():
                    kind = f"{'triton' if src is None else 'sonic'}-{mode}"
                    out = _run(kind, src, server.grpc_address, args.rounds, requests, valgrind=False)
                    measured = json.loads(out.strip().splitlines()[-1])
                    rounds[mode][name] += measured
                    text = " ".join(f"{r:.0f}/s {c:.0f}µs" for r, c in measured)
                    print(f"{mode:5s} {name:12s} rounds: {text}", flush=True)
        for mode in modes:
            for name, src in clients.items():
                measured = rounds[mode][name]
                row: dict[str, float] = {}  # only what was measured (--alternations 0: instructions)
                if measured:
                    row["requests_per_s"] = spread(r for r, _ in measured).median
                    row["cpu_us_per_request"] = spread(c for _, c in measured).median
                if args.instructions:
                    kind = f"{'triton' if src is None else 'sonic'}-{mode}"
                    row["instructions_per_request"] = _instructions(kind, src, server.grpc_address, counts)
                summary[mode][name] = row
                print(f"{mode:5s} {name:12s} {row}", flush=True)
    fields = {
        "requests_per_s": "req/s",
        "cpu_us_per_request": "CPU µs/request",
        "instructions_per_request": "instr",
    }
    for mode in modes:
        reference = summary[mode][TRITON]
        print(f"\n{mode}: client | {' | '.join(fields.values())} | against tritonclient")
        for name, row in summary[mode].items():
            values = " | ".join(f"{row[f]:,.0f}" if f in row else "-" for f in fields)
            ratios = ", ".join(
                f"{row[f] / reference[f]:.2f}x {label}" for f, label in fields.items() if f in row
            )
            print(f"{name} | {values} | {ratios}")
    result = {"server": args.server, "trees": trees, "rounds": rounds, "summary": summary, **machine()}
    print(f"saved {save(args.save_as, result)}")


if __name__ == "__main__":
    main()
