"""What the traffic log does to the garbage collector of a ``sonic serve`` process (issue 26 item 1).

In a fresh interpreter per variant, with what the server imports: the time of one full collection
(median of 7) and the objects it walks, not recording; recording as before (pyarrow, and the pandas its
first conversion imports, all in the collected heap); recording now (``open_traffic_log``: the same
imports, then the start's objects frozen). And how many of 3,000 waiting records one young-generation
collection leaves tracked (then promoted), with the input signature as a nested tuple or as a number.

    .venv/bin/python -m benchmarks.traffic_gc
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from benchmarks.harness.report import save

SNIPPET = """
import gc, json, statistics, sys, tempfile, time
from pathlib import Path
import sonic.cli.main, sonic.server.server
from sonic.protocol.types import InferRequest, InputTensor
from sonic.server.traffic.rows import open_traffic_log, request_row
from sonic.traffic.config import TrafficLogConfig
from sonic.traffic.signatures import Signatures
variant = sys.argv[1]
request = InferRequest("m", "", [InputTensor("INPUT0", "FP32", (1, 16), raw=bytes(64))])
if variant == "recording as before":
    from sonic.server.traffic.table import pending_to_table
    pending_to_table([request_row(request, 1, 1, None, 0)])
elif variant == "recording now":
    open_traffic_log(TrafficLogConfig(Path(tempfile.mkdtemp())))
times = []
for _ in range(7):
    start = time.perf_counter()
    gc.collect()
    times.append(time.perf_counter() - start)
tracked = {}
for name, signatures in (("nested", None), ("numbered", Signatures())):
    gc.collect()
    records = [request_row(request, 1, 1, None, 0, signatures=signatures) for _ in range(3000)]
    gc.collect(0)
    tracked[name] = sum(gc.is_tracked(r) for r in records)
print(json.dumps({"full_collection_ms": 1e3 * statistics.median(times), "objects": len(gc.get_objects()),
                  "frozen": gc.get_freeze_count(), "records_tracked_after_one_young_collection": tracked}))
"""

VARIANTS = ("not recording", "recording as before", "recording now")


def main() -> None:
    results: dict[str, Any] = {}
    for variant in VARIANTS:
        done = subprocess.run(
            [sys.executable, "-c", SNIPPET, variant], check=True, capture_output=True, text=True
        )
        results[variant] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{variant:20s} {results[variant]}", flush=True)
    print(f"saved {save('traffic_gc', {'variants': results})}")


if __name__ == "__main__":
    main()
