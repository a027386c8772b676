"""Ensemble graphs are checked when the ensemble loads; running one forwards parameters and keeps sequences in order."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from sonic.protocol.errors import InvalidArgumentError, ModelConfigError
from sonic.protocol.model_config import parse_config_text
from sonic.server.backends.base import ModelCall
from sonic.server.runtime.ensemble import EnsemblePlan, EnsembleScheduler
from sonic.server.work import WorkItem

pytestmark = pytest.mark.unit

HEAD = """
name: "ens"
platform: "ensemble"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def plan(steps: str) -> EnsemblePlan:
    return EnsemblePlan.from_config(
        parse_config_text(HEAD + f"ensemble_scheduling {{ step [ {steps} ] }}", "t")
    )


def step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: -1 {maps} }}'


def test_valid_chain() -> None:
    result = plan(step("a", {"x": "IN"}, {"y": "mid"}) + "," + step("b", {"x": "mid"}, {"y": "OUT"}))
    assert [s.model_name for s in result.steps] == ["a", "b"]
    assert result.steps[0].model_version == ""


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        (step("a", {"x": "nowhere"}, {"y": "OUT"}), "reads 'nowhere', which is neither an ensemble input"),
        (step("a", {"x": "IN"}, {"y": "other"}), r"no step writes the ensemble output\(s\) \['OUT'\]"),
        (
            step("a", {"x": "IN"}, {"y": "OUT"}) + "," + step("b", {"x": "IN"}, {"y": "OUT"}),
            "writes 'OUT', which step 0 writes too",
        ),
        (step("a", {"x": "IN"}, {"y": "IN"}), "writes 'IN', an ensemble input"),
        (
            step("a", {"x": "IN", "z": "t2"}, {"y": "t1"})
            + ","
            + step("b", {"x": "t1"}, {"y": "t2"})
            + ","
            + step("c", {"x": "t1"}, {"y": "OUT"}),
            r"steps \[0, 1, 2\] depend on each other",
        ),
        (step("ens", {"x": "IN"}, {"y": "OUT"}), "calls the ensemble itself"),
    ],
)
def test_broken_graphs_are_refused(steps: str, message: str) -> None:
    with pytest.raises(ModelConfigError, match=message):
        plan(steps)


def test_no_steps() -> None:
    with pytest.raises(ModelConfigError, match="declares no step"):
        EnsemblePlan.from_config(parse_config_text(HEAD, "t"))


# --- running a plan: what each step request carries, and in which order a sequence's requests enter ---

CHAIN = plan(step("first", {"x": "IN"}, {"y": "mid"}) + ", " + step("second", {"x": "mid"}, {"y": "OUT"}))


class RecordingCaller:
    """The server's step caller as the plan sees it: answers ``x + 1`` once the test releases the call."""

    def __init__(self, held: set[tuple[str, str]] | None = None) -> None:
        self.calls: list[tuple[str, str, dict[str, object]]] = []  # (model, request id, parameters)
        self._held = held or set()  # (model, request id) calls that wait for release()
        self._gates: dict[tuple[str, str], asyncio.Event] = {}

    def release(self, model: str, request_id: str) -> None:
        self._gates.setdefault((model, request_id), asyncio.Event()).set()

    async def infer(self, call: ModelCall) -> dict[str, npt.NDArray[Any]]:
        self.calls.append((call.model_name, call.request_id, dict(call.parameters or {})))
        if (call.model_name, call.request_id) in self._held:
            await self._gates.setdefault((call.model_name, call.request_id), asyncio.Event()).wait()
        return {"y": call.inputs["x"] + 1}


def item(request_id: str, parameters: dict[str, object]) -> WorkItem:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    return WorkItem(
        inputs={"IN": np.zeros(1, np.float32)},
        batch_size=1,
        shape_key=(),
        future=future,
        request_id=request_id,
        parameters=parameters,
    )


async def test_every_step_gets_the_ensemble_requests_parameters() -> None:
    caller = RecordingCaller()
    sent = {
        "sequence_id": 42,
        "sequence_start": True,
        "sequence_end": False,
        "priority": 2,
        "timeout": 5000,
        "detector": "hgcal",
        "binary_data_output": True,  # how the client wants its answer encoded: not the steps' business
    }
    outputs, _ = await EnsembleScheduler(CHAIN, caller).submit(item("r1", sent))
    np.testing.assert_array_equal(outputs["OUT"], np.full(1, 2, np.float32))
    forwarded = {k: v for k, v in sent.items() if k != "binary_data_output"}
    assert caller.calls == [("first", "r1", forwarded), ("second", "r1", forwarded)]


async def test_a_sequences_requests_enter_each_step_in_arrival_order() -> None:
    # r1's first step answers only after r2's: r2 must still wait for r1 at the second step.
    caller = RecordingCaller(held={("first", "r1")})
    scheduler = EnsembleScheduler(CHAIN, caller)
    one = asyncio.create_task(scheduler.submit(item("r1", {"sequence_id": "s", "sequence_start": True})))
    two = asyncio.create_task(scheduler.submit(item("r2", {"sequence_id": "s"})))
    other = asyncio.create_task(scheduler.submit(item("r3", {"sequence_id": "t", "sequence_start": True})))
    await asyncio.wait_for(other, 10)  # another sequence waits for nobody
    assert ("second", "r2") not in [(m, r) for m, r, _ in caller.calls]
    caller.release("first", "r1")
    await asyncio.wait_for(asyncio.gather(one, two), 10)
    assert [r for m, r, _ in caller.calls if m == "second"] == ["r3", "r1", "r2"]


async def test_a_failed_request_does_not_hold_up_its_sequence() -> None:
    class Failing(RecordingCaller):
        async def infer(self, call: ModelCall) -> dict[str, npt.NDArray[Any]]:
            if call.model_name == "first" and call.request_id == "bad":
                raise InvalidArgumentError("bad input")
            return await super().infer(call)

    scheduler = EnsembleScheduler(CHAIN, Failing())
    bad = asyncio.create_task(scheduler.submit(item("bad", {"sequence_id": 9})))
    good = asyncio.create_task(scheduler.submit(item("good", {"sequence_id": 9})))
    with pytest.raises(InvalidArgumentError, match=r"ensemble 'ens' step 0 \(model 'first'\): bad input"):
        await bad
    outputs, _ = await asyncio.wait_for(good, 10)
    np.testing.assert_array_equal(outputs["OUT"], np.full(1, 2, np.float32))
