"""Ensemble graphs are checked when the ensemble loads."""

from __future__ import annotations

import pytest

from sonic.protocol.errors import ModelConfigError
from sonic.protocol.model_config import parse_config_text
from sonic.server.runtime.ensemble import EnsemblePlan

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
