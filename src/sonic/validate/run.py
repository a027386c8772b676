"""One ``sonic validate`` run: the recorded requests to both targets, in order, a bounded number in flight.

Each request goes to the reference and the candidate at once; at most ``concurrency`` requests are in
flight, and answers are compared in the order the requests were recorded (so the sample, the worst
cases and the report are the same on every run). A target that does not answer within ``timeout_s``
is reported for that request (status ``NO ANSWER``, with the deadline) and the replay goes on: the
tool never waits longer than the deadline on one request. Reading the trace and comparing arrays run
in a worker thread, not on the event loop that sends.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from sonic.client.config import TransportKind
from sonic.validate.compare import NO_ANSWER, Answer, Messages, ModelStats, Tolerances, compare_answers
from sonic.validate.source import Recorded, SourceConfig, recorded_models, recorded_requests
from sonic.validate.targets import Call, Target, TargetSpec, open_target


@dataclass(frozen=True)
class ValidateConfig:
    source: SourceConfig
    reference: TargetSpec
    candidate: TargetSpec
    tolerances: Tolerances = field(default_factory=Tolerances)
    # The candidate's names of reference inputs and outputs, where they differ.
    renames: Mapping[str, str] = field(default_factory=dict)
    concurrency: int = 4
    timeout_s: float = 30.0  # per request and target
    transport: TransportKind = TransportKind.H2
    messages: Messages = Messages.EXACT

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"--concurrency must be >= 1, got {self.concurrency}")
        if self.timeout_s <= 0:
            raise ValueError(f"--timeout-s must be > 0, got {self.timeout_s}")


@dataclass
class ValidationResult:
    models: dict[str, ModelStats]
    requests: int
    synthetic: int  # of them sent with seeded inputs
    duration_s: float
    unused: list[str]  # options that named something no answer had: a tolerance's output, a rename

    @property
    def passed(self) -> bool:
        return bool(self.requests) and all(m.passed for m in self.models.values())


def check_models(config: ValidateConfig) -> list[str]:
    """The recorded models to replay; a target naming one model needs a trace (or --model) of one."""
    models = recorded_models(config.source)
    if not models:
        wanted = f" for {', '.join(config.source.models)}" if config.source.models else ""
        raise ValueError(f"no traffic recorded under {config.source.traffic_dir}{wanted}")
    for spec in (config.reference, config.candidate):
        if spec.model and len(models) > 1:
            raise ValueError(
                f"target {spec} names model '{spec.model}' but the trace holds {', '.join(models)}: "
                "choose the recorded one with --model"
            )
    return models


def _call(recorded: Recorded, spec: TargetSpec, renames: Mapping[str, str]) -> Call:
    return Call(
        model=spec.model or recorded.model,
        version=spec.version,
        request_id=recorded.info.request_id,
        arrays={renames.get(name, name): array for name, array in recorded.arrays.items()},
        datatypes={renames.get(name, name): datatype for name, datatype in recorded.datatypes.items()},
        parameters=recorded.parameters,
    )


async def _answer(target: Target, call: Call, timeout_s: float) -> Answer:
    try:
        async with asyncio.timeout(timeout_s):
            return await target.infer(call, timeout_s)
    except TimeoutError:
        return Answer(NO_ANSWER, 0, f"no answer within the deadline of {timeout_s:g} s (--timeout-s)")


class _Run:
    def __init__(self, config: ValidateConfig, reference: Target, candidate: Target) -> None:
        self.config, self.reference, self.candidate = config, reference, candidate
        self.models: dict[str, ModelStats] = {}
        self.synthetic = 0
        self.used_renames: set[str] = set()

    async def both(self, recorded: Recorded) -> tuple[Answer, Answer]:
        renames = self.config.renames
        self.used_renames.update(name for name in recorded.arrays if name in renames)
        reference = _answer(self.reference, _call(recorded, self.config.reference, {}), self.config.timeout_s)
        candidate = _answer(
            self.candidate, _call(recorded, self.config.candidate, renames), self.config.timeout_s
        )
        return await asyncio.gather(reference, candidate)

    def compare(self, recorded: Recorded, answers: tuple[Answer, Answer]) -> None:
        stats = self.models.get(recorded.model)
        if stats is None:
            stats = self.models[recorded.model] = ModelStats(recorded.model)
        self.used_renames.update(name for name in answers[0].outputs if name in self.config.renames)
        self.synthetic += recorded.synthetic
        compare_answers(
            stats, recorded.info, *answers, self.config.tolerances, self.config.renames, self.config.messages
        )


async def validate(
    config: ValidateConfig,
    progress: Callable[[int], None] | None = None,
    *,
    targets: tuple[Target, Target] | None = None,
) -> ValidationResult:
    """Replay the trace to both targets and compare; ``progress`` is called with the requests done.
    ``targets`` (reference, candidate) replaces those the config names (tests); they are closed here."""
    check_models(config)
    started = time.perf_counter()
    if targets is None:
        targets = (
            open_target(config.reference, config.transport, config.timeout_s),
            open_target(config.candidate, config.transport, config.timeout_s),
        )
    reference, candidate = targets
    run = _Run(config, reference, candidate)
    requests: Iterator[Recorded] = recorded_requests(config.source)
    done = 0

    async def finish(oldest: Recorded, task: asyncio.Task[tuple[Answer, Answer]]) -> None:
        nonlocal done
        await asyncio.to_thread(run.compare, oldest, await task)
        done += 1
        if progress is not None:
            progress(done)

    try:
        async with asyncio.TaskGroup() as group:
            pending: deque[tuple[Recorded, asyncio.Task[tuple[Answer, Answer]]]] = deque()
            while (recorded := await asyncio.to_thread(next, requests, None)) is not None:
                pending.append((recorded, group.create_task(run.both(recorded))))
                if len(pending) >= config.concurrency:
                    await finish(*pending.popleft())
            while pending:
                await finish(*pending.popleft())
    finally:
        await reference.close()
        await candidate.close()
    return ValidationResult(
        models=run.models,
        requests=done,
        synthetic=run.synthetic,
        duration_s=time.perf_counter() - started,
        unused=_unused(config, run),
    )


def _unused(config: ValidateConfig, run: _Run) -> list[str]:
    """Options that applied to nothing: said, never silently ignored."""
    used: set[str] = set()
    for stats in run.models.values():
        for name, output in stats.outputs.items():
            key = config.tolerances.key_for(stats.model, name)
            if key is not None and output.floating:
                used.add(key)
    unused = [
        f"tolerance for '{key}': no floating-point output of that name was compared"
        for key in config.tolerances.per_output
        if key not in used
    ]
    unused += [
        f"--rename {name}: no input or output of that name"
        for name in config.renames
        if name not in run.used_renames
    ]
    return unused
