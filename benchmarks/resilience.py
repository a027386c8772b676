"""Client resilience figures (issue 14): recovery after a restart, stall per hung-server episode.

- recovery: one ``sonic serve`` behind one address; SIGKILL, restart on the same port; the time from
  the restarted server's ready line to the first answered call, with the default client settings
  (calls keep coming, one at a time, a failed one paced by 10 ms as a job would move on);
- hung: two servers, 16 callers; SIGSTOP one; the longest wait of any call in the episode (its
  stall) and how many calls stalled, with the default settings (keepalive and the 60 s deadline) and
  with a 1 s deadline; SIGCONT at the end.

The overhead of keepalive and the default deadline on small requests is in ``benchmarks/client.py``
(``small_sonic`` vs ``small_sonic_no_keepalive_no_deadline``); health probes run only after a failure.

Usage: python -m benchmarks.resilience [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from sonic.client import AsyncClient, ClientConfig, ClientError, SharedMemoryMode
from sonic.launch import ServerProcess
from sonic.testing.repository import write_test_repository

X = np.ones((1, 16), np.float32)
FAILED_CALL_PACING_S = 0.01
HUNG_EPISODE_S = 30.0  # longer than keepalive's worst case with the defaults (2 x 10 s + 5 s)


async def recovery_round(repository: Path) -> float:
    server = await asyncio.to_thread(ServerProcess.start, [repository])
    address = server.grpc_address
    port = int(address.rpartition(":")[2])
    config = ClientConfig(servers=(address,), shared_memory=SharedMemoryMode.OFF)
    restarted: ServerProcess | None = None
    try:
        async with AsyncClient("identity", config) as client:
            for _ in range(50):
                await client.infer({"INPUT0": X})
            os.kill(server.pid, signal.SIGKILL)
            await asyncio.to_thread(server.process.wait)

            def start_again() -> tuple[ServerProcess, float]:
                process = ServerProcess.start([repository], grpc_port=port)
                return process, time.perf_counter()  # its ready line was just read

            restart = asyncio.create_task(asyncio.to_thread(start_again))
            ready: float | None = None
            while True:
                if ready is None and restart.done():
                    restarted, ready = restart.result()
                try:
                    await client.infer({"INPUT0": X})
                except ClientError:
                    await asyncio.sleep(FAILED_CALL_PACING_S)  # a job's pacing, not a synchronisation
                    continue
                if ready is not None:
                    return time.perf_counter() - ready
    finally:
        server.stop()
        if restarted is not None:
            restarted.stop()


async def hung_episode(repository: Path, timeout_s: float | None) -> dict[str, float]:
    first, second = await asyncio.gather(
        asyncio.to_thread(ServerProcess.start, [repository]),
        asyncio.to_thread(ServerProcess.start, [repository]),
    )
    overrides: dict[str, Any] = {} if timeout_s is None else {"timeout_s": timeout_s}
    config = ClientConfig(
        servers=(first.grpc_address, second.grpc_address), shared_memory=SharedMemoryMode.OFF, **overrides
    )
    waits: list[float] = []
    try:
        async with AsyncClient("identity", config) as client:
            stop_at = time.perf_counter() + HUNG_EPISODE_S

            async def caller() -> None:
                while time.perf_counter() < stop_at:
                    start = time.perf_counter()
                    await client.infer({"INPUT0": X})
                    waits.append(time.perf_counter() - start)
                    if len(waits) == 200:
                        os.kill(first.pid, signal.SIGSTOP)

            async with asyncio.TaskGroup() as group:
                for _ in range(16):
                    group.create_task(caller())
            typical = float(np.median(waits))
            return {
                "stall_s": max(waits),
                "stalled_calls": sum(w > 100 * typical for w in waits),
                "calls": len(waits),
                "deadline_exceeded": client.statistics.deadline_exceeded,
                "connection_lost": client.statistics.connection_lost,
            }
    finally:
        os.kill(first.pid, signal.SIGCONT)
        first.stop()
        second.stop()


async def main_async(rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sonic-bench-") as tmp:
        repository = write_test_repository(Path(tmp) / "repo", "sonic")
        recovery = [await recovery_round(repository) for _ in range(rounds)]
        defaults = await hung_episode(repository, None)
        short = await hung_episode(repository, 1.0)
    return {
        "recovery_after_restart_s": recovery,
        "recovery_after_restart_s_median": float(np.median(recovery)),
        "hung_server_default_settings": defaults,
        "hung_server_1s_deadline": short,
        "load_average_at_end": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="restarts measured")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/resilience.json"))
    args = parser.parse_args()
    report = asyncio.run(main_async(args.rounds))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
