"""Instructions per small unary request of our HTTP/2 server, core alone and whole, for source trees.

Core (the default): each tree's worker (``benchmarks/h2_cost_worker.py``, ``PYTHONPATH`` = that tree's ``src``) feeds requests
into a server-role core sans I/O and answers them; valgrind counts its instructions for two request counts,
and the difference divided by the difference of counts is the figure (start-up cancels out). Deterministic:
it does not depend on the load of the machine. The workers also print a hash of every byte they wrote, so
the trees are checked to put the same bytes on the wire.

``--server``: the whole ``sonic serve`` of each tree runs under valgrind (identity FP32 [1, 16], the test
repository), and ``sonic.client`` from this checkout (``benchmarks/client_cost_worker.py``, 32 in flight,
200 warm-up calls) sends it the two request counts, one server per count; the server's instructions of the
larger run minus the smaller, divided by the difference of counts.

Usage: ``.venv/bin/python -m benchmarks.h2_cost --tree base=/path/to/old/src --tree after=src [--server]``;
``--server-args NAME=ARGS`` gives one tree's server more arguments (``--tree off=src --tree on=src
--server-args "off=--inline-execution-us 0"``).
Writes ``benchmarks/results/h2_cost.json``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.report import machine, save
from benchmarks.harness.servers import parse_named
from sonic.launch.process import ServerHandle, start_process, temporary_log
from sonic.launch.serve import wait_for_ready_line
from sonic.testing.repository import write_test_repository

WORKER = Path(__file__).with_name("h2_cost_worker.py")
CLIENT = Path(__file__).with_name("client_cost_worker.py")
VALGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
SERVER_START_S = 900.0  # under valgrind, imports and model loading take minutes on a busy machine


def _run(src: str, requests: int) -> tuple[int, str]:
    """Instructions of one worker run, and the hash of what it wrote."""
    command = [*VALGRIND, sys.executable, str(WORKER), str(requests)]
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True, timeout=1800)
    return _instructions(done.stderr), done.stdout.strip()


def _instructions(valgrind_output: str) -> int:
    match = re.search(r"I\s+refs:\s+([\d,]+)", valgrind_output)
    if match is None:
        raise RuntimeError("valgrind printed no instruction count")
    return int(match.group(1).replace(",", ""))


def _serve(
    src: str, repository: Path, requests: int, extra: Sequence[str] = (), concurrency: int = 32
) -> int:
    """Instructions of one ``sonic serve`` of ``src`` (under valgrind, with ``extra`` arguments) that
    answered ``requests`` calls."""
    command = [*VALGRIND, sys.executable, "-m", "sonic.cli.main", "serve", "--host", "127.0.0.1"]
    command += ["--grpc-port", "0", "--model-repository", str(repository), *extra]
    log_path = temporary_log("sonic-h2-cost-")
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    process, addresses = start_process(
        command,
        log_path,
        lambda started: wait_for_ready_line(started, SERVER_START_S),
        env=env,
        read_stdout=True,
    )
    with ServerHandle(process, addresses, log_path) as server:
        client_env = {**os.environ, "PYTHONPATH": str(Path("src").resolve())}
        client = [sys.executable, str(CLIENT), server.grpc_address, "1", str(requests), str(concurrency)]
        subprocess.run(client, capture_output=True, text=True, env=client_env, check=True, timeout=1800)
        server.stop(SERVER_START_S)
    return _instructions(log_path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", help="NAME=PATH of a src/ folder")
    parser.add_argument("--requests", type=int, nargs=2, default=[1000, 3000], metavar=("FEW", "MANY"))
    parser.add_argument("--server", action="store_true", help="the whole sonic serve, not the core alone")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight, with --server")
    parser.add_argument(
        "--tag", default="", help="with --server: results go to results/h2_cost_server-TAG.json"
    )
    parser.add_argument(
        "--server-args",
        action="append",
        default=[],
        help="NAME=ARGS: more sonic serve arguments for one tree, with --server (a PATH may run under two NAMEs)",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        parser.error("needs valgrind")
    trees = dict(item.split("=", 1) for item in args.tree or ["after=src"])
    few, many = args.requests
    summary = {}
    if args.server:
        repository = write_test_repository(Path(tempfile.mkdtemp(prefix="sonic-h2-cost-")), "sonic")
        server_args = parse_named(args.server_args, "--server-args")
        for name, src in trees.items():
            extra = shlex.split(server_args.get(name, ""))
            runs = [_serve(src, repository, count, extra, args.concurrency) for count in (many, few)]
            per_request = (runs[0] - runs[1]) / (many - few)
            summary[name] = {"server_instructions_per_request": per_request}
            print(f"{name:10s} {per_request:,.0f} server instructions/request", flush=True)
        payload = {
            "trees": trees,
            "server_args": server_args,
            "concurrency": args.concurrency,
            "requests": [few, many],
            "summary": summary,
            **machine(),
        }
        print(f"saved {save('h2_cost_server' + (f'-{args.tag}' if args.tag else ''), payload)}")
        return
    for name, src in trees.items():
        (low, _), (high, high_hash) = _run(src, few), _run(src, many)
        summary[name] = {"instructions_per_request": (high - low) / (many - few), "wire_sha256": high_hash}
        print(f"{name:10s} {summary[name]['instructions_per_request']:,.0f} instructions/request", flush=True)
    if len({row["wire_sha256"] for row in summary.values()}) > 1:
        print("the trees wrote different bytes:", {n: r["wire_sha256"] for n, r in summary.items()})
    else:
        print("the trees wrote the same bytes")
    print(
        f"saved {save('h2_cost', {'trees': trees, 'requests': [few, many], 'summary': summary, **machine()})}"
    )


if __name__ == "__main__":
    main()
