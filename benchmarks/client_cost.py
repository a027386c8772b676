"""sonic.client's own cost per small request, for two or more source trees against one server.

Each tree's client runs in its own process (``PYTHONPATH`` = that tree's ``src``) against the same
``sonic serve`` (started from ``--server-src``): identity FP32 [1, 16], 32 in flight, shared memory
off, 200 warm-up calls, then ``--rounds`` rounds of ``--requests`` calls; the figure is the client
process's CPU time per request. Trees alternate, ``--alternations`` times. CPU time swings by ±30 %
between rounds on a shared 2-core machine, so ``--instructions`` also counts the client's
instructions per request under valgrind (the difference between runs of 2,500 and 500 requests,
divided by 2,000, so start-up cancels out): a figure that does not depend on load.

Usage: ``./dev bench client_cost --tree base=/path/to/old/src --tree after=src [--instructions]``.
Writes ``benchmarks/results/client_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness.report import machine, save
from sonic.launch import ServerProcess
from sonic.testing.repository import write_test_repository

WORKER = Path(__file__).with_name("client_cost_worker.py")


def _run_worker(
    src: str, address: str, rounds: int, requests: int, valgrind: bool = False
) -> subprocess.CompletedProcess[str]:
    # A script of its own: it imports only numpy and the tree's sonic.client (older trees lack the rest).
    command = [sys.executable, str(WORKER), address, str(rounds), str(requests)]
    if valgrind:
        command = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            *command,
        ]
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    return subprocess.run(command, capture_output=True, text=True, env=env, check=True, timeout=1800)


def _instructions(src: str, address: str) -> float:
    def count(requests: int) -> int:
        match = re.search(
            r"I\s+refs:\s+([\d,]+)", _run_worker(src, address, 1, requests, valgrind=True).stderr
        )
        if match is None:
            raise RuntimeError("valgrind printed no instruction count")
        return int(match.group(1).replace(",", ""))

    return (count(2500) - count(500)) / 2000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", help="NAME=PATH of a src/ folder")
    parser.add_argument("--server-src", default="src", help="the src/ folder the server runs from")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--alternations", type=int, default=3)
    parser.add_argument("--instructions", action="store_true", help="also count instructions (valgrind)")
    args = parser.parse_args()
    trees = dict(item.split("=", 1) for item in args.tree or ["after=src"])
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind")
    repository = write_test_repository(Path(tempfile.mkdtemp(prefix="sonic-client-cost-")), "sonic")
    server_env = {**os.environ, "PYTHONPATH": str(Path(args.server_src).resolve())}
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    instructions: dict[str, float] = {}
    with ServerProcess.start([repository], env=server_env) as server:
        for _ in range(args.alternations):
            for name, src in trees.items():
                done = _run_worker(src, server.grpc_address, args.rounds, args.requests)
                rounds = json.loads(done.stdout.strip().splitlines()[-1])
                cpu[name].append(statistics.median(rounds))
                print(
                    f"{name:10s} client CPU µs/request, rounds: {' '.join(f'{r:.1f}' for r in rounds)}",
                    flush=True,
                )
        if args.instructions:
            for name, src in trees.items():
                instructions[name] = _instructions(src, server.grpc_address)
                print(f"{name:10s} {instructions[name]:,.0f} instructions/request", flush=True)
    summary = {
        name: {"cpu_us_medians": values, "cpu_us": statistics.median(values)} for name, values in cpu.items()
    }
    for name, value in instructions.items():
        summary[name]["instructions_per_request"] = value
    for name, row in summary.items():
        print(f"{name:10s} median {row['cpu_us']:.1f} µs/request (per alternation {row['cpu_us_medians']})")
    print(f"saved {save('client_cost', {'trees': trees, 'summary': summary, **machine()})}")


if __name__ == "__main__":
    main()
