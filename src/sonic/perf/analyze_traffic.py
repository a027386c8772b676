"""``sonic analyze --traffic DIR``: tune a model's configuration on the traffic its server really saw.

The model's current configuration and every candidate of the search space (:mod:`sonic.perf.analyze`:
dynamic batching, preferred sizes, queue delay, instance count) that differs from it once both are
completed with the server's defaults are served in turn by a ``sonic serve`` started for each replay, and
the recorded trace (``sonic serve --traffic-log``) is replayed against each (:mod:`sonic.perf.replay`,
open loop, ``time_scale`` times as fast as recorded), once per round for ``repeats`` rounds, the order
reversed every other round. :mod:`sonic.perf.decide` then compares each candidate with the current
configuration round by round and recommends one only if it beats it beyond the spread of the rounds.

The trace also gives the seeds' scaling model (:mod:`sonic.perf.scaling`) its one unknown per site:
the server time each request costs (its share of the execution it joined). Over the recorded wall time
that is the servers' utilisation U for the jobs that sent the trace, so one server takes
``jobs_recorded / U`` jobs at the knee (``t_ideal / t_GPU``), and N jobs need ``ceil(N·U/jobs_recorded)``.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from sonic.launch import ServerProcess, ServerStartError
from sonic.perf.analyze import (
    CANDIDATE_SERVER_ARGS,
    SearchSpace,
    base_config,
    candidate_config,
    write_candidate_repository,
)
from sonic.perf.decide import Decision, PairedRounds, decide
from sonic.perf.replay import ReplayConfig, ReplayReport, replay
from sonic.perf.transport import PerfError
from sonic.protocol.model_config import fill_defaults
from sonic.traffic.schema import read_traffic


@dataclass(frozen=True)
class TrafficAnalyzeConfig:
    repository: Path
    model: str
    traffic_dir: Path
    slo_p99_ms: float
    space: SearchSpace = field(default_factory=SearchSpace)
    time_scale: float = 1.0
    repeats: int = 3  # paired rounds: each candidate replayed once per round, as is the current config
    time_budget_s: float = 900.0
    server_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Replayed:
    """One replay of the trace against one configuration."""

    p99_ms: float | None = None  # None: not measured (error says why)
    mean_ms: float | None = None
    failed: int = 0
    fidelity: float = 0.0
    error: str = ""


@dataclass(frozen=True)
class Trial:
    """A configuration and its replays, one per round; the summary figures are their medians."""

    name: str
    config_text: str
    rounds: tuple[Replayed, ...] = ()
    error: str = ""  # why it was not measured at all (identical to the current config, budget spent)

    def _median(self, values: list[float | None]) -> float | None:
        present = [value for value in values if value is not None]
        return statistics.median(present) if present else None

    @property
    def p99_ms(self) -> float | None:
        return self._median([r.p99_ms for r in self.rounds])

    @property
    def mean_ms(self) -> float | None:
        return self._median([r.mean_ms for r in self.rounds])

    @property
    def failed(self) -> int:
        return sum(r.failed for r in self.rounds)

    def meets(self, slo_p99_ms: float) -> bool:
        p99 = self.p99_ms
        return p99 is not None and self.failed == 0 and p99 <= slo_p99_ms

    def p99_per_round(self, rounds: int) -> tuple[float | None, ...]:
        found = [r.p99_ms for r in self.rounds]
        return tuple(found + [None] * (rounds - len(found)))


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
    candidates: tuple[Trial, ...]  # measured, or not with the reason (identical to current, budget)
    decision: Decision
    load: ServerLoad
    elapsed_s: float

    @property
    def recommended(self) -> Trial | None:
        """The candidate that beats the current configuration beyond the noise (:mod:`sonic.perf.decide`)."""
        if self.decision.recommended is None:
            return None
        return next(t for t in self.candidates if t.name == self.decision.recommended.name)


def completed(config: model_config_pb2.ModelConfig) -> model_config_pb2.ModelConfig:
    """``config`` with the defaults a server fills in (instance counts, preferred sizes, ...), group names
    dropped: two configurations equal here are served the same way."""
    done = model_config_pb2.ModelConfig()
    done.CopyFrom(config)
    gpus = [gpu for group in done.instance_group for gpu in group.gpus]
    # fill_defaults checks GPU ids against the GPUs present; both sides see the same count, and a
    # KIND_AUTO group resolves the same way on both, so any count that passes the check compares alike.
    fill_defaults(done, default_filename="", gpu_count=max(gpus, default=0) + 1)
    for group in done.instance_group:
        group.ClearField("name")
    return done


def _replay(config: TrafficAnalyzeConfig, root: Path) -> Replayed:
    try:
        with ServerProcess.start([root], extra_args=(*CANDIDATE_SERVER_ARGS, *config.server_args)) as server:
            settings = ReplayConfig(
                config.traffic_dir, server.grpc_address, config.time_scale, models=(config.model,)
            )
            report: ReplayReport = asyncio.run(replay(settings))
    except (ServerStartError, PerfError) as exc:
        return Replayed(error=f"failed: {exc}")
    result = report.models[config.model]
    return Replayed(
        result.latency.p99_us / 1000, result.latency.mean_us / 1000, result.failed, report.fidelity
    )


@dataclass
class _Entry:
    name: str
    text: str
    root: Path | None  # None: not measured (error says why)
    error: str = ""
    rounds: list[Replayed] = field(default_factory=list)


def _entries(
    config: TrafficAnalyzeConfig, base: model_config_pb2.ModelConfig, tmp: Path, largest: int
) -> tuple[_Entry, list[_Entry]]:
    model_dir = config.repository / config.model
    current = _Entry(
        "current",
        text_format.MessageToString(base),
        write_candidate_repository(model_dir, tmp / "current", base),
    )
    base_done = completed(base)
    entries: list[_Entry] = []
    space = config.space.candidates(model_batches=base.max_batch_size > 0, request_batch_size=largest)
    for index, candidate in enumerate(space):
        rendered = candidate_config(base, candidate)
        text = text_format.MessageToString(rendered)
        if completed(rendered) == base_done:
            entries.append(
                _Entry(candidate.name, text, None, "skipped: the current configuration, completed")
            )
            continue
        entries.append(
            _Entry(candidate.name, text, write_candidate_repository(model_dir, tmp / f"c{index}", rendered))
        )
    return current, entries


def run_traffic_analysis(
    config: TrafficAnalyzeConfig, progress: Callable[[str], None] | None = None
) -> TrafficAnalysis:
    """The current configuration and each distinct candidate replayed once per round, the order of a round
    reversed every other round (a slow spell of the machine hits both ends); then :func:`decide`."""
    base = base_config(config.repository, config.model)
    rows = read_traffic(config.traffic_dir, (config.model,)).to_pylist()
    if not rows:
        raise PerfError(f"no traffic of model '{config.model}' recorded under {config.traffic_dir}")
    largest = max(row["batch_size"] for row in rows)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sonic-analyze-traffic-") as tmp:
        current, entries = _entries(config, base, Path(tmp), largest)
        measured = [entry for entry in entries if entry.root is not None]
        for round_index in range(config.repeats):
            order = [current, *measured]
            for position, entry in enumerate(order if round_index % 2 == 0 else order[::-1]):
                if time.monotonic() - started >= config.time_budget_s:
                    entry.error = entry.error or f"budget of {config.time_budget_s:g} s spent"
                    continue
                if progress is not None:
                    progress(
                        f"[round {round_index + 1}/{config.repeats}, {position + 1}/{len(order)}] {entry.name}"
                    )
                assert entry.root is not None
                entry.rounds.append(_replay(config, entry.root))

    def trial(entry: _Entry) -> Trial:
        return Trial(entry.name, entry.text, tuple(entry.rounds), entry.error)

    current_trial = trial(current)
    trials = tuple(trial(entry) for entry in entries)
    paired = [
        PairedRounds(
            t.name,
            t.p99_per_round(config.repeats),
            current_trial.p99_per_round(config.repeats),
            t.failed,
        )
        for t in trials
        if t.rounds
    ]
    decision = decide(paired, config.slo_p99_ms)
    return TrafficAnalysis(
        config, current_trial, trials, decision, server_load(rows), time.monotonic() - started
    )
