"""Soak (issue 23): mixed load on one ``sonic serve`` for 30 minutes, its RSS sampled to a CSV.

Every worker runs until the end, one call at a time with a short pause (the machine is shared; the
figure is the memory slope, not throughput):

- ``sonic_grpc``: ``sonic.client`` (native HTTP/2 gRPC, shared memory on: this host) calling
  ``identity`` with 1, 8 and 256 rows and ``identity_large`` with 1 and 16 rows;
- ``triton_grpc``: ``tritonclient.grpc``, ``identity_fp16`` of varying length, ``identity_int64``, ``nobatch``;
- ``triton_http``: ``tritonclient.http`` (binary tensors and JSON), ``identity`` and ``identity_bool``;
- ``bad``: requests that must fail (unknown model, wrong shape, wrong datatype, malformed JSON body),
  over both protocols; each must fail with the expected status;
- ``shm``: a system shared-memory region created, registered, used for input and output, unregistered
  and destroyed per call;
- ``reload``: ``small_batch`` unloaded and loaded again (explicit model control), then called.

The server's RSS and anonymous RSS (its process and descendants, from /proc) are written every
``--sample-s`` to ``benchmarks/results/soak/rss.csv``; the summary (``summary.json``) holds the slope
of a linear fit of the anonymous RSS over the last 20 minutes (the last two thirds of a shorter
run) in MB/min, against a target of 0.5, and the same for the whole RSS. (File-backed pages, the
shared libraries, are the kernel's to drop and fault back in on a shared machine: a leak is
anonymous memory.)

Usage: python -m benchmarks.soak [--minutes 30] [--sample-s 5] [--out-dir benchmarks/results/soak]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.soak_fit import Sample, fit_window_s, parse_status, summarize, write_csv
from benchmarks.soak_workers import WORKERS, Run, Tally
from sonic.launch import ServerProcess
from sonic.testing.repository import write_test_repository

# --- the run ---------------------------------------------------------------------------------------


def process_tree_rss(pid: int) -> tuple[int, int]:
    """RSS and anonymous RSS of ``pid`` and its descendants (backend stubs, if any)."""
    total, anon, pending = 0, 0, [pid]
    while pending:
        current = pending.pop()
        try:
            rss, rss_anon = parse_status(Path(f"/proc/{current}/status").read_text())
            total, anon = total + rss, anon + rss_anon
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited between the listing and the read
    return total, anon


def soak(repository: Path, minutes: float, sample_s: float, pause_s: float, csv_path: Path) -> dict[str, Any]:
    server = ServerProcess.start(
        [repository],
        extra_args=["--http-port", "0", "--model-control-mode", "explicit", "--load-model", "*"],
    )
    run = Run(server, Tally(), threading.Event(), pause_s)
    threads = [threading.Thread(target=w, args=(run,), name=w.__name__) for w in WORKERS]
    samples: list[Sample] = []
    started = time.monotonic()
    end = started + minutes * 60.0
    try:
        for thread in threads:
            thread.start()
        while True:
            now = time.monotonic()
            tally = run.tally
            samples.append(
                Sample(
                    round(now - started, 2),
                    *process_tree_rss(server.pid),
                    tally.calls,
                    tally.expected_errors,
                    tally.unexpected_errors,
                )
            )
            write_csv(csv_path, samples)  # whole file each time: a killed run still leaves its CSV
            if now >= end or server.process.poll() is not None:
                break
            time.sleep(min(sample_s, max(end - now, 0.0)))  # the sampling period itself
    finally:
        run.stop.set()
        for thread in threads:
            thread.join()
        code = server.stop()
    report = summarize(samples, fit_window_s(minutes))
    report |= {
        "minutes": minutes,
        "server_exit_code": code,
        "first_unexpected_errors": run.tally.first_unexpected,
        "load_average_at_end": os.getloadavg(),
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the run")
    parser.add_argument("--sample-s", type=float, default=5.0, help="RSS sampling period")
    parser.add_argument("--pause-ms", type=float, default=5.0, help="pause of each worker between calls")
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/soak"))
    args = parser.parse_args()
    if args.minutes <= 0 or args.sample_s <= 0 or args.pause_ms < 0:
        parser.error("--minutes and --sample-s must be positive, --pause-ms not negative")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sonic-soak-") as tmp:
        repository = write_test_repository(Path(tmp) / "repo", "sonic")
        report = soak(repository, args.minutes, args.sample_s, args.pause_ms / 1000, args.out_dir / "rss.csv")
    (args.out_dir / "summary.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
