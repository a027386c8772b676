"""How long a request waits on hand-offs between the event loop and the instance thread, frontend left out.

In one process: a model manager with the identity model (onnxruntime, dynamic batching), and
``--concurrency`` callers on the event loop, each spending ``--loop-work-us`` of CPU on the loop per
request (standing in for a frontend's decode and encode) and then awaiting ``ModelVersion.infer``.
With no waits the loop would be busy all the time and serve about 1e6 / loop-work-us requests/s.
The report gives requests/s, the fraction of wall time the loop sat idle in its selector with all
32 requests elsewhere (queued, executing, or finished but not yet handed back: the hand-off waits),
the loop's CPU per request and the mean batch. The standard asyncio loop is used, so its selector
can be timed; a loaded machine lowers requests/s, the idle fraction much less.

    .venv/bin/python -m benchmarks.runtime_handoff [--concurrency 32] [--loop-work-us 100] [--seconds 3]
        [--switch-interval-us N]

Run it with another checkout's ``src`` first on PYTHONPATH to compare runtimes (same arguments).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.protocol.types import InferRequest, InputTensor
from sonic.server.config import ServerConfig
from sonic.server.models.manager import ModelManager


def spin(us: float) -> None:
    """Busy CPU on the calling thread (the loop), holding the GIL as a frontend's Python code does."""
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


async def run(concurrency: int, loop_work_us: float, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        identity_model(root / "identity" / "1" / "model.onnx")
        (root / "identity" / "config.pbtxt").write_text(IDENTITY_CONFIG)
        manager = ModelManager(ServerConfig(model_repositories=(root,)))
        await manager.load("identity")
        model = manager.get("identity")
        payload = np.ones((1, 16), np.float32).tobytes()
        count = 0
        measuring = False

        async def caller(deadline: float) -> None:
            nonlocal count
            while time.perf_counter() < deadline:
                spin(loop_work_us)
                request = InferRequest("identity", "", [InputTensor("INPUT0", "FP32", (1, 16), raw=payload)])
                await model.infer(request)
                if measuring:
                    count += 1

        selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
        select = selector.select
        idle = [0.0]

        def timed_select(timeout: float | None = None) -> object:
            begin = time.perf_counter()
            try:
                return select(timeout)
            finally:
                idle[0] += time.perf_counter() - begin

        selector.select = timed_select
        warm = time.perf_counter() + 1.0
        await asyncio.gather(*(caller(warm) for _ in range(concurrency)))
        measuring = True
        idle[0] = 0.0
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        await asyncio.gather(*(caller(wall0 + seconds) for _ in range(concurrency)))
        cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
        executions = model.stats.execution_count
        await manager.close()
    return {
        "requests_per_s": count / wall,
        "loop_idle": idle[0] / wall,
        "loop_cpu_us_per_request": 1e6 * cpu / count,
        "mean_batch": model.stats.inference_count / max(executions, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--loop-work-us", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--switch-interval-us", type=float, help="sys.setswitchinterval for this run")
    args = parser.parse_args()
    if args.switch_interval_us:
        sys.setswitchinterval(args.switch_interval_us / 1e6)
    # The standard loop (not uvloop): its selector can be timed.
    result = asyncio.run(run(args.concurrency, args.loop_work_us, args.seconds))
    print(
        f"{result['requests_per_s']:8.0f} req/s  loop idle {result['loop_idle']:.2f}  "
        f"loop {result['loop_cpu_us_per_request']:.0f} CPU us/request  mean batch {result['mean_batch']:.1f}"
        + (f"  (ceiling {1e6 / args.loop_work_us:.0f} req/s)" if args.loop_work_us else "")
    )


if __name__ == "__main__":
    main()
