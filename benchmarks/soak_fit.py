"""The pure parts of ``benchmarks/soak.py``: samples, their CSV, /proc parsing and the slope fit."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

TARGET_MB_PER_MIN = 0.5
FIT_WINDOW_S = 20 * 60.0
MB = 1_000_000


@dataclass(frozen=True)
class Sample:
    elapsed_s: float
    rss_bytes: int  # VmRSS: anonymous + file-backed + shared pages
    rss_anon_bytes: int  # RssAnon: what the process allocated itself (heap, arenas, buffers)
    calls: int
    expected_errors: int
    unexpected_errors: int


def fit_window_s(minutes: float) -> float:
    """20 minutes of a 30-minute run (the first 10 are warm-up: caches, arenas); two thirds of a shorter one."""
    return min(FIT_WINDOW_S, minutes * 60.0 * 2 / 3)


def last_window(samples: Sequence[Sample], window_s: float) -> list[Sample]:
    if not samples:
        return []
    start = samples[-1].elapsed_s - window_s
    return [s for s in samples if s.elapsed_s >= start]


def slope_per_minute(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute."""
    if len(points) < 2:
        raise ValueError(f"a slope needs at least 2 samples, got {len(points)}")
    xs = np.array([p[0] for p in points], dtype=np.float64)
    ys = np.array([p[1] for p in points], dtype=np.float64)
    spread = float(((xs - xs.mean()) ** 2).sum())
    if spread == 0.0:
        raise ValueError("the samples share one time: no slope")
    return float(((xs - xs.mean()) * (ys - ys.mean())).sum() / spread) * 60.0


def summarize(samples: Sequence[Sample], window_s: float) -> dict[str, Any]:
    """The target is on the anonymous RSS: file-backed pages (shared libraries) come and go with
    the page cache of a shared machine (40 MB vanished at once in one run) and leak nothing."""
    window = last_window(samples, window_s)
    slope = slope_per_minute([(s.elapsed_s, s.rss_anon_bytes / MB) for s in window])
    total_slope = slope_per_minute([(s.elapsed_s, s.rss_bytes / MB) for s in window])
    return {
        "samples": len(samples),
        "duration_s": round(samples[-1].elapsed_s, 1),
        "fit_window_s": window_s,
        "rss_anon_start_mb": round(samples[0].rss_anon_bytes / MB, 2),
        "rss_anon_window_start_mb": round(window[0].rss_anon_bytes / MB, 2),
        "rss_anon_end_mb": round(samples[-1].rss_anon_bytes / MB, 2),
        "rss_anon_max_mb": round(max(s.rss_anon_bytes for s in samples) / MB, 2),
        "slope_mb_per_min": round(slope, 4),
        "target_mb_per_min": TARGET_MB_PER_MIN,
        "within_target": slope < TARGET_MB_PER_MIN,
        "rss_start_mb": round(samples[0].rss_bytes / MB, 2),
        "rss_end_mb": round(samples[-1].rss_bytes / MB, 2),
        "rss_slope_mb_per_min": round(total_slope, 4),
        "calls": samples[-1].calls,
        "expected_errors": samples[-1].expected_errors,
        "unexpected_errors": samples[-1].unexpected_errors,
    }


def write_csv(path: Path, samples: Sequence[Sample]) -> None:
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow([f.name for f in fields(Sample)])
        writer.writerows(astuple(s) for s in samples)


def read_csv(path: Path) -> list[Sample]:
    with path.open(newline="", encoding="utf-8") as source:
        rows = list(csv.DictReader(source))
    return [
        Sample(
            float(r["elapsed_s"]),
            int(r["rss_bytes"]),
            int(r["rss_anon_bytes"]),
            int(r["calls"]),
            int(r["expected_errors"]),
            int(r["unexpected_errors"]),
        )
        for r in rows
    ]


def parse_status(status_text: str) -> tuple[int, int]:
    """Bytes of ``VmRSS`` and ``RssAnon`` in a /proc/PID/status text (0 for a zombie, which has none)."""
    found = {"VmRSS:": 0, "RssAnon:": 0}
    for line in status_text.splitlines():
        parts = line.split()
        if parts and parts[0] in found:
            key, value, unit = parts[:3]
            if unit != "kB":
                raise ValueError(f"{key} in {unit!r}: expected kB")
            found[key] = int(value) * 1024
    return found["VmRSS:"], found["RssAnon:"]
