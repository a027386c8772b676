"""Ensembles and the models their steps call: an ensemble serves only while every step model does.

What Triton 2.51 does, and the manager does with this module:

- an ensemble loads only once each step model has a ready version; loading it (at start-up or
  through the load API in explicit mode) first loads the step models that have none, and fails with
  Triton's words when one stays unloaded (:func:`missing_step_error`);
- unloading a step model unloads the ensembles that call it (their reason: "unloaded"); when that
  step model loads again, those ensembles load again (:class:`StepGraph` remembers them);
- unloading an ensemble leaves its step models loaded, unless asked to unload its dependents
  (``unload_dependents``): then its step models that were loaded only as its steps (not on request)
  and that no other loaded ensemble calls unload too.

:class:`StepGraph` does no I/O itself: the manager hands it its own ``load``/``unload`` and the state
of a model (:class:`StepState`), so the rules read in one place and the manager stays the lifecycle.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import ModelConfigError, SonicError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepState:
    """What an ensemble needs to know of one of its step models."""

    known: bool  # listed in the index (in a repository, or loaded once)
    ready: bool  # has a READY version
    reason: str = ""  # why not, when not ready


class Load(Protocol):
    """The manager's ``load``: ``chain`` names the ensembles loading ``name`` as a step, outermost first."""

    def __call__(self, name: str, *, chain: tuple[str, ...]) -> Awaitable[None]: ...


def step_models(config: model_config_pb2.ModelConfig) -> tuple[str, ...]:
    """The models an ensemble's steps call, each once in step order; () for any other model."""
    if config.platform != "ensemble":
        return ()
    return tuple(dict.fromkeys(step.model_name for step in config.ensemble_scheduling.step))


def missing_step_error(ensemble: str, step: str, known: bool, reason: str) -> ModelConfigError:
    """Triton's load error of an ensemble whose step model ``step`` has no ready version.

    ``known``: the step model is in a repository (``reason``: why it has no ready version).
    """
    if not known:
        return ModelConfigError(
            f"ensemble {ensemble} contains models that are not available or ambiguous: {step}"
        )
    message = f"ensemble '{ensemble}' depends on '{step}' which has no loaded version."
    if reason:
        message += f" Model '{step}' loading failed with error: {reason}"
    return ModelConfigError(message)


def cycle_error(chain: tuple[str, ...], step: str) -> ModelConfigError:
    path = " -> ".join((*chain, step))
    return ModelConfigError(
        f"ensemble '{chain[-1]}': its step model '{step}' needs it back ({path}, a cycle)"
    )


@dataclass
class StepGraph:
    """Which loaded ensembles call which models, and which ensembles wait for a step to load again.

    ``load``, ``unload`` and ``state`` are the manager's: how to load and unload a model, and where a
    model stands."""

    load: Load
    unload: Callable[[str], Awaitable[None]]
    state: Callable[[str], StepState]
    calls: dict[str, tuple[str, ...]] = field(default_factory=dict)  # loaded ensemble -> its step models
    waiting: dict[str, tuple[str, ...]] = field(default_factory=dict)  # unloaded with a step -> steps
    requested: set[str] = field(default_factory=set)  # loaded on request, not only as a step

    def loaded(self, name: str, steps: tuple[str, ...]) -> None:
        """``name`` loaded (``steps`` () for a model that is no ensemble)."""
        self.waiting.pop(name, None)
        if steps:
            self.calls[name] = steps
        else:
            self.calls.pop(name, None)

    def forget(self, name: str) -> None:
        """``name`` is unloaded on purpose: it no longer waits for its steps."""
        self.calls.pop(name, None)
        self.waiting.pop(name, None)
        self.requested.discard(name)

    def dependents(self, name: str) -> list[str]:
        """The loaded ensembles that call ``name``, now waiting for it: unload them with it."""
        found = [ensemble for ensemble, steps in self.calls.items() if name in steps]
        for ensemble in found:
            self.waiting[ensemble] = self.calls.pop(ensemble)
        return found

    def unused(self, steps: tuple[str, ...]) -> list[str]:
        """Those of ``steps`` that were loaded only as steps and that no loaded ensemble calls."""
        called = {step for steps in self.calls.values() for step in steps}
        return [step for step in steps if step not in called and step not in self.requested]

    def waiting_for(self, name: str) -> dict[str, tuple[str, ...]]:
        """The ensembles unloaded with their step ``name`` (and all their steps), to load again with it."""
        return {ensemble: steps for ensemble, steps in self.waiting.items() if name in steps}

    async def load_steps(self, chain: tuple[str, ...], steps: tuple[str, ...]) -> None:
        """Before the ensemble ``chain[-1]`` loads: load its steps that have no ready version, and fail
        with Triton's words when one stays so."""
        for step in steps:
            if step in chain:
                raise cycle_error(chain, step)
            if not self.state(step).ready:
                with contextlib.suppress(SonicError):  # the check below reports it
                    await self.load(step, chain=chain)
            now = self.state(step)
            if not now.ready:
                raise missing_step_error(chain[-1], step, now.known, now.reason)

    async def load_waiting(self, name: str, chain: tuple[str, ...]) -> None:
        """``name`` loaded: load again the ensembles that were unloaded with it, once all their steps are."""
        for ensemble, steps in self.waiting_for(name).items():
            if ensemble not in chain and all(self.state(step).ready for step in steps):
                with contextlib.suppress(SonicError):  # recorded in the index
                    await self.load(ensemble, chain=chain)

    async def unload_dependents(self, name: str) -> None:
        """``name`` was unloaded: unload the ensembles that call it (and theirs), as Triton does."""
        for ensemble in self.dependents(name):
            log.warning("%s", missing_step_error(ensemble, name, known=False, reason=""))
            await self.unload(ensemble)
