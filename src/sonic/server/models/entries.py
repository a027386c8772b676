"""What the model manager records of each model: its versions' states and reasons, as the index shows them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2

from sonic.protocol.wire import ModelState
from sonic.server.models.ensemble_steps import StepState
from sonic.server.models.version import ModelVersion

UNLOADED = "unloaded"  # the reason of a model or version unloaded on request (Triton's word)


@dataclass(eq=False)
class VersionState:
    state: ModelState
    reason: str = ""
    model: ModelVersion | None = None


@dataclass(eq=False)
class ModelEntry:
    name: str
    versions: dict[int, VersionState] = field(default_factory=dict)
    state: ModelState = ModelState.UNAVAILABLE  # model-level, for failures before any version exists
    reason: str = ""
    config: model_config_pb2.ModelConfig | None = None
    fingerprint: tuple[object, ...] = ()
    override: model_config_pb2.ModelConfig | None = None  # the load override serving now, if any
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def ready_models(self) -> list[ModelVersion]:
        return [
            s.model
            for _, s in sorted(self.versions.items())
            if s.state is ModelState.READY and s.model is not None
        ]

    def counts_as_ready(self) -> bool:
        """Triton's strict readiness, for one model: every version READY or unloaded; a model with no
        version (it failed before any was created) only when it was unloaded since."""
        if not self.versions:
            return self.reason == UNLOADED
        return all(s.state is ModelState.READY or s.reason == UNLOADED for s in self.versions.values())

    def versions_and_reasons(self) -> str:
        """What follows Triton's "has no available versions": each version's state and reason, or the
        model's reason when it failed before any version was created (its configuration, its folder)."""
        if not self.versions:
            return self.reason
        return "; ".join(
            f"version {version} is {state.state.value}" + (f": {state.reason}" if state.reason else "")
            for version, state in sorted(self.versions.items())
        )

    def why_not_ready(self) -> str:
        """The model's reason, else the first version's that has one ("" when none does)."""
        return self.reason or next((s.reason for s in self.versions.values() if s.reason), "")


@dataclass(frozen=True)
class IndexRow:
    name: str
    version: str
    state: ModelState
    reason: str


def step_state(entry: ModelEntry | None) -> StepState:
    """What an ensemble needs to know of a step model (``entry`` None: never seen)."""
    if entry is None:
        return StepState(known=False, ready=False)
    return StepState(known=True, ready=bool(entry.ready_models()), reason=entry.why_not_ready())
