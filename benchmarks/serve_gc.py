"""What a full garbage collection costs inside a started ``sonic serve``, with and without the start-up
freeze (``sonic.server.server.freeze_start_up``, called by ``Server.start`` once the models are loaded, when
``sonic serve`` starts it).

In a fresh interpreter per variant: what ``sonic serve`` imports, a ``Server`` started on REPOSITORY
(gRPC, HTTP and metrics front ends on free ports, every model loaded), then the time of one full
collection (median of 7) and the objects it walks; "frozen at start-up" is the server as ``sonic serve``
starts it now (``Server.start(freeze_heap=True)``), "not frozen (as before)" the same server started
without the freeze. Then the server shuts down. The variants alternate, ``--repeats`` times each.

    .venv/bin/python -m benchmarks.serve_gc --repository /tmp/demo26-models
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness.report import save

SNIPPET = """
import asyncio, gc, json, statistics, sys, time
from pathlib import Path
import sonic.cli.main
from sonic.server.config import GrpcConfig, HttpConfig, MetricsConfig, ServerConfig
from sonic.server.server import Server

variant, repository = sys.argv[1], Path(sys.argv[2])

async def main() -> dict:
    config = ServerConfig(
        (repository,), grpc=GrpcConfig(port=0), http=HttpConfig(port=0), metrics=MetricsConfig(port=0)
    )
    server = Server(config)
    started = time.perf_counter()
    await server.start(freeze_heap=variant == "frozen at start-up")
    start_s = time.perf_counter() - started
    times = []
    for _ in range(7):
        begin = time.perf_counter()
        gc.collect()
        times.append(time.perf_counter() - begin)
    figures = {"full_collection_ms": 1e3 * statistics.median(times), "min_ms": 1e3 * min(times),
               "tracked_objects": len(gc.get_objects()), "frozen": gc.get_freeze_count(),
               "models": server.models.loaded_models(), "start_s": start_s}
    await server.shutdown()
    return figures

print(json.dumps(asyncio.run(main())))
"""

VARIANTS = ("frozen at start-up", "not frozen (as before)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repository", type=Path, required=True, help="models the server loads")
    parser.add_argument("--repeats", type=int, default=3, help="fresh interpreters per variant, alternating")
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    for repeat in range(args.repeats):
        for variant in VARIANTS if repeat % 2 == 0 else VARIANTS[::-1]:
            done = subprocess.run(
                [sys.executable, "-c", SNIPPET, variant, str(args.repository)],
                check=True,
                capture_output=True,
                text=True,
            )
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            results[variant].append(figures)
            print(f"{variant:24s} {figures}", flush=True)
    print(f"saved {save('serve_gc', {'repository': str(args.repository), 'variants': results})}")


if __name__ == "__main__":
    main()
