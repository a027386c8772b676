"""``sonic analyze``: model analyzer's role for our server.

For each candidate configuration (instance count, max batch size, dynamic batching on/off,
preferred batch sizes, max queue delay) the model's ``config.pbtxt`` is rewritten into a
repository of its own (version directories linked, not copied), ``sonic serve`` is started on
it, the load generator of ``sonic perf`` measures the same levels, and the server is stopped.
Candidates are ranked by an objective under a p99 latency constraint. The whole sweep is bounded
by ``time_budget_s``: candidates not started in time are reported as skipped, never guessed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from sonic.launch import ServerProcess, ServerStartError
from sonic.perf.engine import LevelResult, LoadLevel, MeasurementConfig, PerfConfig, run_perf
from sonic.perf.transport import PerfError
from sonic.protocol.errors import SonicError
from sonic.protocol.model_config import CONFIG_FILENAME, load_config_file
from sonic.server.models.load_config import VersionsFailedError, prepare_config
from sonic.server.models.repository import ModelLocation


@dataclass(frozen=True)
class Candidate:
    instance_count: int
    max_batch_size: int
    dynamic_batching: bool
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0

    @property
    def name(self) -> str:
        text = f"instances={self.instance_count} max_batch={self.max_batch_size}"
        if not self.dynamic_batching:
            return text + " dynamic_batching=off"
        preferred = ",".join(map(str, self.preferred_batch_sizes)) or "-"
        return text + f" dynamic_batching=on preferred={preferred} delay_us={self.max_queue_delay_us}"


@dataclass(frozen=True)
class SearchSpace:
    instance_counts: tuple[int, ...] = (1, 2)
    max_batch_sizes: tuple[int, ...] = (8, 32)
    dynamic_batching: tuple[bool, ...] = (False, True)
    preferred_batch_sizes: tuple[tuple[int, ...], ...] = ((),)
    max_queue_delays_us: tuple[int, ...] = (0, 100)

    def candidates(self, *, model_batches: bool, request_batch_size: int) -> list[Candidate]:
        """Every distinct combination that can serve requests of ``request_batch_size``."""
        if not model_batches:
            return [Candidate(count, 0, dynamic_batching=False) for count in self.instance_counts]
        found: list[Candidate] = []
        for count, max_batch, dynamic in itertools.product(
            self.instance_counts, self.max_batch_sizes, self.dynamic_batching
        ):
            if max_batch < request_batch_size:
                continue
            if not dynamic:
                found.append(Candidate(count, max_batch, dynamic_batching=False))
                continue
            for preferred, delay in itertools.product(self.preferred_batch_sizes, self.max_queue_delays_us):
                usable = tuple(size for size in preferred if size <= max_batch)
                candidate = Candidate(count, max_batch, True, usable, delay)
                if candidate not in found:
                    found.append(candidate)
        return found


def candidate_config(
    base: model_config_pb2.ModelConfig, candidate: Candidate
) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    config.CopyFrom(base)
    config.max_batch_size = candidate.max_batch_size
    config.ClearField("dynamic_batching")
    if candidate.dynamic_batching:
        config.dynamic_batching.preferred_batch_size.extend(candidate.preferred_batch_sizes)
        config.dynamic_batching.max_queue_delay_microseconds = candidate.max_queue_delay_us
        config.dynamic_batching.SetInParent()
    kind = (
        base.instance_group[0].kind if base.instance_group else model_config_pb2.ModelInstanceGroup.KIND_AUTO
    )
    gpus = list(base.instance_group[0].gpus) if base.instance_group else []
    config.ClearField("instance_group")
    config.instance_group.add(count=candidate.instance_count, kind=kind, gpus=gpus)
    return config


# The candidate repositories link to the model's own files: the servers analyze starts must follow them.
CANDIDATE_SERVER_ARGS = ("--allow-model-links-outside",)


def write_candidate_repository(model_dir: Path, root: Path, config: model_config_pb2.ModelConfig) -> Path:
    """``root/<model>``: links to everything of ``model_dir`` but its config, and the candidate config
    (served with :data:`CANDIDATE_SERVER_ARGS`)."""
    target = root / model_dir.name
    target.mkdir(parents=True)
    for entry in model_dir.iterdir():
        if entry.name != CONFIG_FILENAME:
            (target / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    (target / CONFIG_FILENAME).write_text(text_format.MessageToString(config), encoding="utf-8")
    return root


@dataclass(frozen=True)
class AnalyzeConfig:
    repository: Path
    model: str
    levels: tuple[LoadLevel, ...]
    space: SearchSpace = field(default_factory=SearchSpace)
    batch_size: int = 1
    measurement: MeasurementConfig = field(default_factory=MeasurementConfig)
    objective: str = "throughput"  # or "latency"
    max_p99_latency_ms: float = 0.0  # 0: no constraint
    time_budget_s: float = 600.0
    repeats: int = 1  # runs per candidate; the best is kept
    server_args: tuple[str, ...] = ()
    input_data: str = "random"
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class CandidateResult:
    candidate: Candidate
    config_text: str
    results: tuple[LevelResult, ...] = ()
    error: str = ""  # why it has no measurement: failed to start, failed to serve, or skipped
    measured_s: float = 0.0  # all runs together
    runs: int = 0

    def eligible(self, max_p99_latency_ms: float) -> list[LevelResult]:
        return [
            r
            for r in self.results
            if r.errors == 0 and (max_p99_latency_ms <= 0 or r.latency.p99_us <= max_p99_latency_ms * 1000)
        ]


@dataclass(frozen=True)
class Ranked:
    result: CandidateResult
    score: float | None  # inferences/s (throughput) or p99 ms (latency); None: constraint never met
    best_level: LevelResult | None


def score(result: CandidateResult, objective: str, max_p99_latency_ms: float) -> Ranked:
    levels = result.eligible(max_p99_latency_ms)
    if not levels:
        return Ranked(result, None, None)
    if objective == "throughput":
        best = max(levels, key=lambda r: r.inferences_per_s)
        return Ranked(result, best.inferences_per_s, best)
    last = levels[-1]  # latency: the p99 at the heaviest load that meets the constraint
    return Ranked(result, last.latency.p99_us / 1000, last)


def rank(results: Sequence[CandidateResult], objective: str, max_p99_latency_ms: float) -> list[Ranked]:
    if objective not in {"throughput", "latency"}:
        raise PerfError(f"objective must be 'throughput' or 'latency', got {objective!r}")
    ranked = [score(r, objective, max_p99_latency_ms) for r in results]
    sign = -1.0 if objective == "throughput" else 1.0
    return sorted(ranked, key=lambda r: (r.score is None, 0.0 if r.score is None else sign * r.score))


@dataclass(frozen=True)
class AnalysisReport:
    config: AnalyzeConfig
    ranked: tuple[Ranked, ...]
    elapsed_s: float
    notes: tuple[str, ...] = field(default=())

    @property
    def best(self) -> Ranked | None:
        top = self.ranked[0] if self.ranked else None
        return top if top is not None and top.score is not None else None


Progress = Callable[[str], None]


def _measure(
    config: AnalyzeConfig, candidate: Candidate, config_text: str, server_address: str
) -> CandidateResult:
    perf = PerfConfig(
        url=server_address,
        model=config.model,
        levels=config.levels,
        batch_size=config.batch_size,
        measurement=config.measurement,
        input_data=config.input_data,
        shapes=config.shapes,
    )
    started = time.monotonic()
    report = asyncio.run(run_perf(perf))
    return CandidateResult(candidate, config_text, report.results, measured_s=time.monotonic() - started)


def _measure_once(
    config: AnalyzeConfig, model_dir: Path, candidate: Candidate, rendered: model_config_pb2.ModelConfig
) -> CandidateResult:
    text = text_format.MessageToString(rendered)
    with tempfile.TemporaryDirectory(prefix="sonic-analyze-") as tmp:
        root = write_candidate_repository(model_dir, Path(tmp) / "repository", rendered)
        try:
            with ServerProcess.start(
                [root], extra_args=(*CANDIDATE_SERVER_ARGS, *config.server_args)
            ) as server:
                return _measure(config, candidate, text, server.grpc_address)
        except (ServerStartError, PerfError, SonicError) as exc:
            return CandidateResult(candidate, text, error=f"failed: {exc}")


def _better(config: AnalyzeConfig, kept: CandidateResult | None, new: CandidateResult) -> CandidateResult:
    """Of two runs of one candidate, the one that scores better (best of N: other work only slows a run)."""
    runs = (kept.runs if kept else 0) + 1
    measured_s = (kept.measured_s if kept else 0.0) + new.measured_s
    winner = new
    if kept is not None and kept.results:
        ranked = rank([kept, new], config.objective, config.max_p99_latency_ms)
        winner = ranked[0].result
    return dataclasses.replace(winner, runs=runs, measured_s=measured_s)


def base_config(repository: Path, model: str) -> model_config_pb2.ModelConfig:
    """The configuration candidates start from: the model's ``config.pbtxt``, else the one ``sonic serve``
    auto-completes from the model file (an ONNX model needs no config.pbtxt), with its instance group
    left to the server (kind AUTO). PerfError, in one line, when neither can be had."""
    model_dir = repository / model
    if not model_dir.is_dir():
        raise PerfError(f"no model folder '{model}' in the repository {repository}")
    try:
        if (model_dir / CONFIG_FILENAME).is_file():
            base = load_config_file(model_dir / CONFIG_FILENAME)
        else:
            base = prepare_config(ModelLocation(model, model_dir), None, gpu_count=0).config
            base.ClearField("instance_group")  # the server chooses CPU or GPU, as for a config without one
    except VersionsFailedError as exc:  # the backend refused the model file while completing its config
        raise PerfError(f"model '{model}': {exc.error}") from None
    except SonicError as exc:
        raise PerfError(f"model '{model}': {exc}") from None
    base.name = base.name or model
    return base


def run_analysis(config: AnalyzeConfig, progress: Progress | None = None) -> AnalysisReport:
    """Measure every candidate ``repeats`` times, round robin (so a slow spell of the machine hits
    different candidates in different rounds), and keep each candidate's best run."""
    model_dir = config.repository / config.model
    base = base_config(config.repository, config.model)
    candidates = config.space.candidates(
        model_batches=base.max_batch_size > 0, request_batch_size=config.batch_size
    )
    if not candidates:
        raise PerfError(
            f"no candidate configuration can serve batch size {config.batch_size} (max batch sizes "
            f"{list(config.space.max_batch_sizes)})"
        )
    started = time.monotonic()
    kept: dict[int, CandidateResult] = {}
    for repeat in range(config.repeats):
        for index, candidate in enumerate(candidates):
            rendered = candidate_config(base, candidate)
            if time.monotonic() - started >= config.time_budget_s:
                if index not in kept:
                    note = f"skipped: time budget of {config.time_budget_s:g} s spent"
                    kept[index] = CandidateResult(
                        candidate, text_format.MessageToString(rendered), error=note
                    )
                continue
            if progress is not None:
                progress(
                    f"[round {repeat + 1}/{config.repeats}, {index + 1}/{len(candidates)}] {candidate.name}"
                )
            result = _measure_once(config, model_dir, candidate, rendered)
            kept[index] = _better(config, kept.get(index), result)
            if progress is not None and result.results:
                best = max(result.results, key=lambda r: r.inferences_per_s)
                progress(
                    f"    best {best.inferences_per_s:,.1f} infer/s at {best.level.label}, "
                    f"p99 {best.latency.p99_us / 1000:,.2f} ms"
                )
    results = [kept[index] for index in range(len(candidates))]
    ranked = rank(results, config.objective, config.max_p99_latency_ms)
    return AnalysisReport(config, tuple(ranked), time.monotonic() - started)
