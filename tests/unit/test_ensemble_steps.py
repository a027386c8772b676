"""An ensemble serves only while its step models do: the rules of ``server/models/ensemble_steps.py``."""

from __future__ import annotations

import pytest

from sonic.protocol.errors import ModelConfigError, NotFoundError
from sonic.protocol.model_config import parse_config_text
from sonic.server.models.ensemble_steps import StepGraph, StepState, missing_step_error, step_models

pytestmark = pytest.mark.unit


class Models:
    """A manager's models as the graph sees them: which are ready, and a ``load`` that records calls."""

    def __init__(self, ready: set[str], loadable: set[str], known: set[str] | None = None) -> None:
        self.ready = set(ready)
        self.loadable = loadable
        self.known = known if known is not None else ready | loadable
        self.loads: list[tuple[str, tuple[str, ...]]] = []
        self.unloads: list[str] = []
        self.graph: StepGraph | None = None

    async def unload(self, name: str) -> None:
        self.unloads.append(name)
        self.ready.discard(name)
        assert self.graph is not None
        await self.graph.unload_dependents(name)

    async def load(self, name: str, *, chain: tuple[str, ...]) -> None:
        self.loads.append((name, chain))
        if name not in self.known:
            raise NotFoundError(f"no model {name}")
        if name not in self.loadable:
            raise ModelConfigError(f"{name} failed")
        self.ready.add(name)

    def state(self, name: str) -> StepState:
        ready = name in self.ready
        return StepState(
            known=name in self.known, ready=ready, reason="" if ready else "RuntimeError: no GPU"
        )


def graph(models: Models) -> StepGraph:
    models.graph = StepGraph(models.load, models.unload, models.state)
    return models.graph


def test_step_models_of_an_ensemble_each_once() -> None:
    config = parse_config_text(
        'name: "e" platform: "ensemble" ensemble_scheduling { step [ '
        '{ model_name: "a" } , { model_name: "b" }, { model_name: "a" } ] }',
        "t",
    )
    assert step_models(config) == ("a", "b")
    assert step_models(parse_config_text('name: "m" backend: "python"', "t")) == ()


async def test_loading_an_ensemble_loads_the_steps_that_are_not_ready() -> None:
    models = Models(ready={"a"}, loadable={"b"})
    await graph(models).load_steps(("e",), ("a", "b"))
    assert models.loads == [("b", ("e",))]


async def test_a_step_that_stays_unloaded_fails_the_ensemble_in_tritons_words() -> None:
    models = Models(ready=set(), loadable=set(), known={"gpu_step"})
    with pytest.raises(ModelConfigError) as info:
        await graph(models).load_steps(("e",), ("gpu_step",))
    assert str(info.value) == (
        "ensemble 'e' depends on 'gpu_step' which has no loaded version. "
        "Model 'gpu_step' loading failed with error: RuntimeError: no GPU"
    )
    with pytest.raises(
        ModelConfigError, match=r"^ensemble e contains models that are not available or ambiguous: x$"
    ):
        await graph(models).load_steps(("e",), ("x",))


async def test_an_ensemble_calling_itself_back_is_a_cycle() -> None:
    models = Models(ready=set(), loadable=set())
    with pytest.raises(
        ModelConfigError, match=r"its step model 'outer' needs it back \(outer -> inner -> outer"
    ):
        await graph(models).load_steps(("outer", "inner"), ("outer",))
    assert models.loads == []


async def test_unloading_a_step_unloads_its_ensembles_and_loading_it_brings_them_back() -> None:
    models = Models(ready={"b"}, loadable={"a", "e1", "e2"})
    steps = graph(models)
    steps.loaded("a", ())
    steps.loaded("e1", ("a", "b"))
    steps.loaded("e2", ("e1",))  # an ensemble of an ensemble
    steps.loaded("other", ("b",))
    await models.unload("a")
    assert models.unloads == ["a", "e1", "e2"]
    assert steps.waiting_for("a") == {"e1": ("a", "b")}
    await models.load("a", chain=())
    await steps.load_waiting("a", ())
    assert models.loads == [("a", ()), ("e1", ())]


async def test_an_ensemble_unloaded_on_purpose_no_longer_waits_and_its_steps_stay() -> None:
    steps = graph(Models(ready={"a"}, loadable=set()))
    steps.loaded("e", ("a",))
    steps.forget("e")
    assert steps.dependents("a") == []
    steps.loaded("e", ("a",))
    assert steps.dependents("a") == ["e"]
    steps.forget("e")  # unloaded while waiting for its step
    assert steps.waiting_for("a") == {}


def test_missing_step_error_without_a_reason() -> None:
    assert str(missing_step_error("e", "s", known=True, reason="")) == (
        "ensemble 'e' depends on 's' which has no loaded version."
    )


def test_unused_steps_are_those_no_loaded_ensemble_calls() -> None:
    steps = graph(Models(ready=set(), loadable=set()))
    steps.loaded("e1", ("a", "b"))
    steps.loaded("e2", ("b",))
    steps.forget("e1")
    assert steps.unused(("a", "b")) == ["a"]


def test_steps_loaded_on_request_are_never_unused() -> None:
    steps = graph(Models(ready=set(), loadable=set()))
    steps.requested.add("a")
    assert steps.unused(("a", "b")) == ["b"]
    steps.forget("a")  # unloaded on request
    assert steps.unused(("a", "b")) == ["a", "b"]
