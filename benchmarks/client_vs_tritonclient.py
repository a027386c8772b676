"""sonic.client against NVIDIA's tritonclient: requests per second and the client's own cost per request.

One server, ``--server sonic`` (``sonic serve`` from ``--server-src``, the test repository's
``identity`` model on onnxruntime) or ``--server triton`` (NVIDIA Triton 2.51, the ``tritonserver`` of
the nvidia-pytriton wheel on CPU, the same ``identity`` ONNX file run by onnxruntime in a Python
backend ``model.py``): FP32 [1, 16], dynamic batching with no queue delay, one instance. Clients, each in its own process: every ``--tree`` (``NAME=PATH`` of a
``src/`` folder: its ``sonic.client``) and tritonclient from this environment; ``async`` mode runs 32
callers on ``AsyncClient`` / ``tritonclient.grpc.aio``, ``sync`` mode one caller on ``SyncClient`` /
``tritonclient.grpc``. Clients alternate ``--alternations`` times, ``--rounds`` rounds each; the
figures are medians of the rounds, and each tree against tritonclient also as the median of per-round
ratios (round k of each, seconds apart). On a shared machine req/s and CPU time swing with the other jobs,
so ``--instructions`` also counts each client's instructions per request under valgrind (runs of
``--valgrind-requests`` A and B requests, their difference divided by A - B: start-up cancels out),
a figure that does not depend on load.

Usage: ``python -m benchmarks.client_vs_tritonclient --tree base=/path/to/old/src --tree after=src
[--server triton] [--instructions] [--save-as NAME]``. Writes ``benchmarks/results/NAME.json``
(``client_vs_tritonclient`` unless ``--save-as``). The server is stopped by PID on the way out.
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

from tritonclient.grpc import InferenceServerClient

from benchmarks.harness.ratios import spread
from benchmarks.harness.report import machine, save
from benchmarks.harness.servers import parse_named
from sonic.launch import ServerHandle, ServerProcess
from sonic.launch.process import free_port
from sonic.launch.triton import TritonProcess, libs_path, prepare_backend_directory, tritonserver_command
from sonic.testing.repository import MODELS, write_test_repository

WORKER = Path(__file__).with_name("client_vs_tritonclient_worker.py")
TRITON = "tritonclient"
MODEL = "identity"
TRITON_READY_TIMEOUT_S = 300.0  # six Python stubs' worth of start-up on a loaded 2-core machine fits


def _start_triton(workdir: Path) -> TritonProcess:
    """Triton 2.51 serving only ``identity`` (one Python stub), as tests/integration/triton_helpers.py starts it."""
    models = tuple(m for m in MODELS if m.name == MODEL)
    repository = write_test_repository(workdir / "models", "triton", models)
    ports = {"grpc": free_port(), "http": free_port(), "metrics": free_port()}
    command = tritonserver_command([repository], ports, backend_directory=prepare_backend_directory(workdir))
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (env.get("LD_LIBRARY_PATH"), str(libs_path())) if p)
    # The Python backend stub runs the interpreter found on PATH: this one, whose numpy and onnxruntime
    # the generated model.py imports.
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    address = f"127.0.0.1:{ports['grpc']}"
    return TritonProcess.launch(
        command, address, [MODEL], TRITON_READY_TIMEOUT_S, env, workdir / "triton.log"
    )


def _start_server(kind: str, server_src: str, workdir: Path) -> ServerHandle:
    if kind == "triton":
        return _start_triton(workdir)
    repository = write_test_repository(workdir / "models", "sonic")
    return ServerProcess.start(
        [repository], env={**os.environ, "PYTHONPATH": str(Path(server_src).resolve())}
    )


def _server_version(address: str) -> str:
    """What the server says it is (ServerMetadata): the record of which server was measured."""
    client = InferenceServerClient(url=address)
    try:
        metadata = client.get_server_metadata()
        return f"{metadata.name} {metadata.version}"
    finally:
        client.close()


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
    parser.add_argument("--server", choices=["sonic", "triton"], default="sonic", help="which server")
    parser.add_argument("--server-src", help="the src/ folder sonic serve runs from (default src)")
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
    if args.server == "triton" and args.server_src is not None:
        parser.error("--server-src names sonic's tree: it has no meaning with --server triton")
    rounds: dict[str, dict[str, list[list[float]]]] = {m: {c: [] for c in clients} for m in modes}
    summary: dict[str, dict[str, dict[str, float]]] = {m: {} for m in modes}
    with (
        tempfile.TemporaryDirectory(prefix="sonic-client-vs-triton-") as workdir,
        _start_server(args.server, args.server_src or "src", Path(workdir)) as server,
    ):
        server_version = _server_version(server.grpc_address)
        print(f"server: {server_version} at {server.grpc_address} (pid {server.pid})", flush=True)
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
                if measured and src is not None:
                    # Round k of each client against round k of tritonclient, seconds apart under the
                    # same background load: a ratio of medians would mix rounds of different loads.
                    pairs = list(zip(measured, rounds[mode][TRITON], strict=True))
                    row["requests_per_s_ratio_paired"] = spread(a[0] / b[0] for a, b in pairs).median
                    row["cpu_ratio_paired"] = spread(a[1] / b[1] for a, b in pairs).median
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
            paired = [
                f"{row[f]:.2f}x {f}" for f in ("requests_per_s_ratio_paired", "cpu_ratio_paired") if f in row
            ]
            print(
                f"{name} | {values} | {ratios}{' (paired by round: ' + ', '.join(paired) + ')' if paired else ''}"
            )
    result = {
        "server": args.server,
        "server_version": server_version,
        "trees": trees,
        "rounds": rounds,
        "summary": summary,
        **machine(),
    }
    print(f"saved {save(args.save_as, result)}")


if __name__ == "__main__":
    main()
