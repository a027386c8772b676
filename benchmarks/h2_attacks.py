"""What each HTTP/2, gRPC and HTTP/REST attack costs `sonic serve`: CPU, memory, and everyone else's wait.

For each attack in ``sonic.testing.h2attacks``, a fresh server (gRPC native + HTTP) is started and
warmed with one call; then the attack runs from its own sockets while a well-behaved tritonclient.grpc
client calls ``identity`` back to back (each call with a ``--timeout-s`` deadline). Recorded: the
server's CPU seconds during the attack (from /proc), its RSS growth (VmRSS after minus before) and
peak growth (VmHWM minus VmRSS before), the bystander's worst latency and whether every call was
answered, and what the server answered the attacker.

    python -m benchmarks.h2_attacks [--only rapid_reset ...] [--out benchmarks/results/h2_attacks.json]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from benchmarks.harness.processes import cpu_seconds, peak_rss_mb
from benchmarks.harness.report import machine, save
from sonic.h2.frames import ErrorCode
from sonic.launch import ServerProcess
from sonic.models.simple import write_sample_repository
from sonic.testing import h2attacks
from sonic.testing.bomb import gzip_zeros

MiB = 1 << 20
Attack = Callable[[ServerProcess], str]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _goaway(code: int | None) -> str:
    return "closed, no GOAWAY" if code is None else f"GOAWAY {ErrorCode(code).name}"


def _accepted(sent: int) -> str:
    """How much of a flood (16 MiB of CONTINUATION, 64 MiB of SETTINGS or PING) the server read."""
    return f"read {sent / MiB:.1f} MiB"


def attacks(bomb: bytes) -> dict[str, Attack]:
    def memo(server: ServerProcess) -> str:
        start = _rss_mb(server.pid)
        held: list[float] = []
        h2attacks.header_memo(server.grpc_address, lambda: held.append(_rss_mb(server.pid) - start))
        return f"RSS +{held[0]:.0f} MiB while the 8 connections were open"

    def zero_window(server: ServerProcess) -> str:
        h2attacks.zero_window_burst(server.grpc_address)
        return "-"

    def grpc(status: tuple[int, str]) -> str:
        return f"grpc-status {status[0]}: {status[1][:90]}"

    def http(status: tuple[int, str]) -> str:
        return f"HTTP {status[0]}: {status[1][:90]}"

    def flood(result: tuple[int, int | None]) -> str:
        return f"{_accepted(result[0])}; {_goaway(result[1])}"

    return {
        "hpack_size_updates": lambda s: _goaway(
            h2attacks.hpack_size_updates(s.grpc_address, continuation=False)
        ),
        "hpack_size_updates_continuation": lambda s: _goaway(
            h2attacks.hpack_size_updates(s.grpc_address, continuation=True)
        ),
        "continuation_flood_empty": lambda s: flood(h2attacks.continuation_flood(s.grpc_address, b"")),
        "continuation_flood_16KiB": lambda s: flood(
            h2attacks.continuation_flood(s.grpc_address, b"\x00" * 16384)
        ),
        "header_memo_8_connections": memo,
        "rapid_reset_20k": lambda s: _goaway(h2attacks.rapid_reset(s.grpc_address)),
        "zero_window_5k_streams_burst": zero_window,
        "settings_flood_no_read": lambda s: _accepted(
            h2attacks.ack_flood(s.grpc_address, h2attacks.SETTINGS_UNIT)
        ),
        "ping_flood_no_read": lambda s: _accepted(h2attacks.ack_flood(s.grpc_address, h2attacks.PING_UNIT)),
        "grpc_gzip_bomb_1GiB": lambda s: grpc(h2attacks.grpc_gzip_bomb(s.grpc_address, bomb)),
        "http_deep_json": lambda s: http(h2attacks.http_deep_json(s.http_address)),
        "http_content_length_3GiB": lambda s: (
            h2attacks.http_content_length(s.http_address).split(b"\r\n", 1)[0].decode(errors="replace")
        ),
        "http_gzip_bomb_1GiB": lambda s: http(h2attacks.http_gzip_bomb(s.http_address, bomb)),
    }


def measure(repository: Path, attack: Attack, timeout_s: float) -> dict[str, Any]:
    with ServerProcess.start([repository], extra_args=["--http-port", "0"]) as server:
        bystander = h2attacks.Bystander(server.grpc_address, timeout_s)
        try:
            bystander.call()
            rss_before, cpu_before = _rss_mb(server.pid), cpu_seconds(server.pid)
            start = time.perf_counter()
            answered, outcome = True, "-"
            with ThreadPoolExecutor(1) as pool:
                future = pool.submit(attack, server)
                try:
                    bystander.during(lambda: wait([future]))  # the attack's own error is read below
                except AssertionError:
                    answered = False  # a call not answered within the deadline; the attack still finishes
                try:
                    outcome = future.result()
                except Exception as exc:  # noqa: BLE001  (recorded: the attacker's view)
                    outcome = f"{type(exc).__name__}: {exc}"
            return {
                "seconds": round(time.perf_counter() - start, 2),
                "server_cpu_s": round(cpu_seconds(server.pid) - cpu_before, 2),
                "rss_growth_mb": round(_rss_mb(server.pid) - rss_before, 1),
                "peak_rss_growth_mb": round(peak_rss_mb(server.pid) - rss_before, 1),
                "bystander_worst_ms": round(bystander.worst_s * 1000, 1),
                "bystander_calls": bystander.calls,
                "bystander_all_answered": answered,
                "server_answer": outcome,
            }
        finally:
            bystander.close()
            server.stop(timeout_s=10)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", default=None, help="attack names to run (default: all)")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="deadline of each bystander call")
    parser.add_argument("--out", default="h2_attacks", help="results name under benchmarks/results/")
    args = parser.parse_args()
    table = attacks(gzip_zeros(1 << 30))
    names = args.only or list(table)
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as folder:
        repository = write_sample_repository(Path(folder))
        print(
            f"{'attack':34} {'cpu s':>7} {'RSS +MiB':>9} {'peak +MiB':>10} {'worst ms':>9}  answered  server's answer"
        )
        for name in names:
            rows[name] = row = measure(repository, table[name], args.timeout_s)
            print(
                f"{name:34} {row['server_cpu_s']:7.2f} {row['rss_growth_mb']:9.1f} {row['peak_rss_growth_mb']:10.1f} "
                f"{row['bystander_worst_ms']:9.1f}  {'yes' if row['bystander_all_answered'] else 'NO':8}  "
                f"{row['server_answer']}",
                flush=True,
            )
    path = save(args.out, {"machine": machine(), "bystander_timeout_s": args.timeout_s, "attacks": rows})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
