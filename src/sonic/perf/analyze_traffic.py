"""``sonic analyze --traffic DIR``: tune a model's configuration on the traffic its server really saw.

The model's current configuration and every candidate of the search space (:mod:`sonic.perf.analyze`:
dynamic batching, preferred sizes, queue delay, instance count) are served in turn by a ``sonic serve``
started for it, and the recorded trace (``sonic serve --traffic-log``) is replayed against each
(:mod:`sonic.perf.replay`, open loop, ``time_scale`` times as fast as recorded). A candidate qualifies
when no request failed and its p99 latency meets the objective (``slo_p99_ms``); the recommendation is
the qualifying candidate with the lowest p99, with its measured gain over the current configuration.

The trace also gives the seeds' scaling model (:mod:`sonic.perf.scaling`) its one unknown per site:
the server time each request costs (its share of the execution it joined). Over the recorded wall time
that is the servers' utilisation U for the jobs that sent the trace, so one server takes
``jobs_recorded / U`` jobs at the knee (``t_ideal / t_GPU``), and N jobs need ``ceil(N·U/jobs_recorded)``.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from sonic.launch import ServerProcess, ServerStartError
from sonic.perf.analyze import (
    CANDIDATE_SERVER_ARGS,
    Candidate,
    SearchSpace,
    candidate_config,
    write_candidate_repository,
)
from sonic.perf.replay import ReplayConfig, ReplayReport, replay
from sonic.perf.transport import PerfError
from sonic.protocol.model_config import CONFIG_FILENAME, load_config_file
from sonic.traffic.schema import read_traffic


@dataclass(frozen=True)
class TrafficAnalyzeConfig:
    repository: Path
    model: str
    traffic_dir: Path
    slo_p99_ms: float
    space: SearchSpace = field(default_factory=SearchSpace)
    time_scale: float = 1.0
    repeats: int = 1  # replays per candidate; the best is kept
    time_budget_s: float = 900.0
    server_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Trial:
    name: str
    config_text: str
    p99_ms: float | None = None  # None: not measured (error says why)
    mean_ms: float | None = None
    failed: int = 0
    fidelity: float = 0.0
    error: str = ""

    def meets(self, slo_p99_ms: float) -> bool:
        return self.p99_ms is not None and self.failed == 0 and self.p99_ms <= slo_p99_ms


@dataclass(frozen=True)
class ServerLoad:
    """From the trace alone: how busy the model's server was for the jobs that sent it."""

    requests: int
    wall_s: float
    server_s: float  # sum over requests of their share of the executions they joined

    @property
    def utilisation(self) -> float:
        return self.server_s / self.wall_s if self.wall_s > 0 else 0.0

    def jobs_per_server(self, jobs_recorded: int) -> float:
        return jobs_recorded / self.utilisation if self.utilisation > 0 else math.inf

    def servers_for(self, jobs: int, jobs_recorded: int) -> int:
        return max(1, math.ceil(jobs / self.jobs_per_server(jobs_recorded)))


def server_load(rows: list[dict[str, Any]]) -> ServerLoad:
    if not rows:
        return ServerLoad(0, 0.0, 0.0)
    arrivals = [row["arrival_unix_ns"] for row in rows]
    last_end = max(row["arrival_unix_ns"] + row["total_us"] * 1000 for row in rows)
    busy_us = 0.0
    for row in rows:
        compute = row["compute_input_us"] + row["compute_infer_us"] + row["compute_output_us"]
        share = row["batch_size"] / row["executed_batch_size"] if row["executed_batch_size"] else 1.0
        busy_us += compute * share
    return ServerLoad(len(rows), (last_end - min(arrivals)) / 1e9, busy_us / 1e6)


@dataclass(frozen=True)
class TrafficAnalysis:
    config: TrafficAnalyzeConfig
    current: Trial
    candidates: tuple[Trial, ...]
    load: ServerLoad
    elapsed_s: float

    @property
    def recommended(self) -> Trial | None:
        meeting = [t for t in (self.current, *self.candidates) if t.meets(self.config.slo_p99_ms)]
        return min(meeting, key=lambda t: t.p99_ms or 0.0) if meeting else None


def _trial(config: TrafficAnalyzeConfig, name: str, text: str, root: Path) -> Trial:
    best: Trial | None = None
    for _ in range(config.repeats):
        try:
            with ServerProcess.start(
                [root], extra_args=(*CANDIDATE_SERVER_ARGS, *config.server_args)
            ) as server:
                settings = ReplayConfig(
                    config.traffic_dir, server.grpc_address, config.time_scale, models=(config.model,)
                )
                report: ReplayReport = asyncio.run(replay(settings))
        except (ServerStartError, PerfError) as exc:
            return Trial(name, text, error=f"failed: {exc}")
        result = report.models[config.model]
        latency = result.latency
        trial = Trial(
            name, text, latency.p99_us / 1000, latency.mean_us / 1000, result.failed, report.fidelity
        )
        if best is None or (trial.failed, trial.p99_ms or 0.0) < (best.failed, best.p99_ms or 0.0):
            best = trial
    assert best is not None
    return best


def run_traffic_analysis(
    config: TrafficAnalyzeConfig, progress: Callable[[str], None] | None = None
) -> TrafficAnalysis:
    model_dir = config.repository / config.model
    base = load_config_file(model_dir / CONFIG_FILENAME)
    base.name = base.name or config.model
    rows = read_traffic(config.traffic_dir, (config.model,)).to_pylist()
    if not rows:
        raise PerfError(f"no traffic of model '{config.model}' recorded under {config.traffic_dir}")
    largest = max(row["batch_size"] for row in rows)
    candidates: list[Candidate] = config.space.candidates(
        model_batches=base.max_batch_size > 0, request_batch_size=largest
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sonic-analyze-traffic-") as tmp:
        current_text = text_format.MessageToString(base)
        root = write_candidate_repository(model_dir, Path(tmp) / "current", base)
        if progress is not None:
            progress(f"[current] {config.model} as configured")
        current = _trial(config, "current", current_text, root)
        trials = []
        for index, candidate in enumerate(candidates):
            rendered = candidate_config(base, candidate)
            text = text_format.MessageToString(rendered)
            if time.monotonic() - started >= config.time_budget_s:
                trials.append(
                    Trial(
                        candidate.name,
                        text,
                        error=f"skipped: time budget of {config.time_budget_s:g} s spent",
                    )
                )
                continue
            if progress is not None:
                progress(f"[{index + 1}/{len(candidates)}] {candidate.name}")
            root = write_candidate_repository(model_dir, Path(tmp) / f"c{index}", rendered)
            trials.append(_trial(config, candidate.name, text, root))
    return TrafficAnalysis(config, current, tuple(trials), server_load(rows), time.monotonic() - started)
