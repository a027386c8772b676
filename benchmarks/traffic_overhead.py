"""What ``sonic serve --traffic-log`` costs per request: the server's CPU by thread, with and without it.

Two servers of the same tree (identity ``[1, 16]`` FP32 at 32 in flight), visited in turn, the order
reversed every other round; per round each gives requests/s and the CPU its threads spent per request
(read from /proc/PID/task), so the event loop's share and the writer thread's are seen apart. On a
shared machine the requests/s swing; the CPU per request of each thread is the steadier figure.

    .venv/bin/python -m benchmarks.traffic_overhead [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.load import infer_request_bytes, load_with_server_cpu
from benchmarks.harness.report import save
from sonic.launch import ServerProcess
from sonic.testing.repository import MODELS, write_test_repository


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds by thread id (Python 3.11 does not give its threads OS names)."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        found[task.name] = (int(fields[11]) + int(fields[12])) / tick
    return found


def loop_and_rest(before: dict[str, float], after: dict[str, float], done: float) -> tuple[float, float]:
    """µs per request of the busiest thread (the event loop) and of all the others together."""
    spent = sorted((after[t] - before.get(t, 0.0) for t in after), reverse=True)
    return 1e6 * spent[0] / done, 1e6 * sum(spent[1:]) / done


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--window-s", type=float, default=4.0)
    args = parser.parse_args()
    models = tuple(m for m in MODELS if m.name == "identity")
    repository = write_test_repository(Path(tempfile.mkdtemp(prefix="sonic-traffic-")), "sonic", models)
    request = infer_request_bytes("identity", {"INPUT0": np.ones((1, 16), np.float32)}, {"INPUT0": "FP32"})
    variants = {"off": [], "on": ["--traffic-log", tempfile.mkdtemp(prefix="sonic-traffic-log-")]}
    servers = {name: ServerProcess.start([repository], extra_args=extra) for name, extra in variants.items()}
    rows: list[dict[str, Any]] = []
    try:
        for server in servers.values():  # warm: first imports, first files
            load_with_server_cpu(server.grpc_address, request, server.pid, concurrency=32, window_s=2.0)
        for round_index in range(args.rounds):
            names = list(servers) if round_index % 2 == 0 else list(servers)[::-1]
            for name in names:
                server = servers[name]
                before = thread_cpu_s(server.pid)
                result, cpu_us = load_with_server_cpu(
                    server.grpc_address, request, server.pid, concurrency=32, window_s=args.window_s
                )
                after = thread_cpu_s(server.pid)
                done = result.requests_per_s * args.window_s
                loop_us, rest_us = loop_and_rest(before, after, done)
                rows.append(
                    {
                        "round": round_index,
                        "variant": name,
                        "requests_per_s": result.requests_per_s,
                        "server_cpu_us_per_request": cpu_us,
                        "loop_us_per_request": loop_us,
                        "other_threads_us_per_request": rest_us,
                    }
                )
                print(
                    f"round {round_index} {name:4s} {result.requests_per_s:8.1f} req/s {cpu_us:6.0f} µs/req: "
                    f"loop {loop_us:6.1f}, other threads {rest_us:6.1f}  load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    finally:
        for server in servers.values():
            server.stop()
    summary: dict[str, Any] = {}
    for key in (
        "requests_per_s",
        "server_cpu_us_per_request",
        "loop_us_per_request",
        "other_threads_us_per_request",
    ):
        per_round = []
        for round_index in range(args.rounds):
            on, off = (
                next(r for r in rows if r["round"] == round_index and r["variant"] == v)
                for v in ("on", "off")
            )
            per_round.append(float(on[key]) / float(off[key]) if off[key] else 0.0)
        summary[f"{key} on/off"] = {
            "rounds": [round(x, 3) for x in per_round],
            "median": statistics.median(per_round),
            "min": min(per_round),
            "max": max(per_round),
        }
    for variant in ("off", "on"):
        mine = [r for r in rows if r["variant"] == variant]
        for key in ("server_cpu_us_per_request", "loop_us_per_request", "other_threads_us_per_request"):
            summary[f"{variant} {key} median"] = statistics.median(float(r[key]) for r in mine)
    print(summary)
    print(f"saved {save('traffic_overhead', {'rows': rows, 'summary': summary})}")


if __name__ == "__main__":
    main()
