"""Per-module and per-event timing of a workflow run, and its JSON form."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ModuleTiming:
    """One module on one event, seconds. CPU modules fill ``cpu_s``/``wall_s``; SONIC modules the rest.

    ``acquire_s``/``produce_s``: wall time of the two halves (preprocessing, postprocessing);
    ``cpu_s``: this thread's CPU time in the module (``time.thread_time``), either kind;
    ``inference_s``: inputs handed over to outputs back (all requests of the event);
    ``wait_s``: how long the stream stood idle for them (what overlap could not hide).
    """

    module: str
    wall_s: float = 0.0
    cpu_s: float = 0.0
    acquire_s: float = 0.0
    inference_s: float = 0.0
    wait_s: float = 0.0
    produce_s: float = 0.0
    requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0


@dataclass(frozen=True)
class EventRecord:
    index: int
    stream: int
    start_s: float  # from the start of the run
    wall_s: float
    modules: tuple[ModuleTiming, ...]


@dataclass(frozen=True)
class RunReport:
    mode: str
    streams: int
    wall_s: float
    events: tuple[EventRecord, ...]
    server: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> per-event server times

    @property
    def event_count(self) -> int:
        return len(self.events)

    @property
    def events_per_s(self) -> float:
        return self.event_count / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def time_per_event_s(self) -> float:
        """Wall time per event of one stream: what seed 002 and the scaling model call per-event time."""
        return self.wall_s * self.streams / self.event_count if self.event_count else 0.0

    def module_means(self) -> dict[str, dict[str, float]]:
        """Mean over events of each field of each module."""
        sums: dict[str, dict[str, float]] = {}
        for event in self.events:
            for timing in event.modules:
                row = sums.setdefault(timing.module, {})
                for key, value in asdict(timing).items():
                    if key != "module":
                        row[key] = row.get(key, 0.0) + float(value)
        count = max(1, self.event_count)
        return {module: {k: v / count for k, v in row.items()} for module, row in sums.items()}

    def summary(self) -> dict[str, Any]:
        walls = [e.wall_s for e in self.events]
        return {
            "mode": self.mode,
            "streams": self.streams,
            "events": self.event_count,
            "wall_s": self.wall_s,
            "events_per_s": self.events_per_s,
            "time_per_event_s": self.time_per_event_s,
            "event_wall_mean_s": statistics.fmean(walls) if walls else 0.0,
            "event_wall_max_s": max(walls, default=0.0),
            "modules": self.module_means(),
            "server": self.server,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "events": [asdict(e) for e in self.events]}

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1))
