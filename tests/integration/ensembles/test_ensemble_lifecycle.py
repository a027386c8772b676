"""Ensembles and their step models, asked of ``sonic serve`` and of real NVIDIA Triton 2.51 alike.

Each test runs against both servers (Triton: the ``tritonserver`` binary of the nvidia-pytriton wheel,
skipped where it cannot run) in explicit model control mode, over the same Python-backend folders,
and asserts what Triton answers:

- the ensemble request's sequence id (integer and string), start/end flags, timeout and custom
  parameters reach its step (``echo_parameters`` answers what its request carried); a BLS call
  carries those its ``pb_utils.InferenceRequest`` was given;
- loading an ensemble loads its step models; an ensemble whose step cannot load does not load, with
  Triton's words; unloading a step model unloads the ensemble, loading it again brings the ensemble
  back; unloading the ensemble leaves the step loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tests.integration.triton_helpers import SERVERS, Endpoint, serving
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess

pytestmark = [pytest.mark.integration]

PYTHON_MODELS = Path(__file__).parent.parent / "backends" / "python_models"
ECHO_CONFIG = """
name: "echo_parameters"
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [
  { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "SEQUENCE" data_type: TYPE_STRING dims: [ 1 ] }
]
"""
ENSEMBLE_CONFIG = """
name: "{name}"
platform: "ensemble"
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "P" data_type: TYPE_STRING dims: [ 1 ] }}, {{ name: "S" data_type: TYPE_STRING dims: [ 1 ] }} ]
ensemble_scheduling {{ step [ {{ model_name: "{step}" model_version: -1
  input_map {{ key: "X" value: "X" }}
  output_map {{ key: "PARAMETERS" value: "P" }} output_map {{ key: "SEQUENCE" value: "S" }} }} ] }}
"""
CUSTOM = {"detector": "hgcal", "events": 3, "debug": True}


def _model(repo: Path, name: str, config: str, code: Path | None = None) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config, encoding="utf-8")
    if code is not None:
        (repo / name / "1" / "model.py").write_bytes(code.read_bytes())


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("ensembles") / "models"
    _model(
        repo,
        "echo_parameters",
        ECHO_CONFIG,
        PYTHON_MODELS / "echo_parameters.py",
    )
    _model(repo, "broken", ECHO_CONFIG.replace("echo_parameters", "broken"), PYTHON_MODELS / "broken.py")
    bls = ECHO_CONFIG.replace("echo_parameters", "bls_forward")
    _model(repo, "bls_forward", bls, PYTHON_MODELS / "bls_forward.py")
    ensembles = (
        ("echo_ens", "echo_parameters"),
        ("echo_ens2", "echo_parameters"),
        ("broken_ens", "broken"),
        ("missing_ens", "nowhere"),
    )
    for name, step in ensembles:
        _model(repo, name, ENSEMBLE_CONFIG.format(name=name, step=step))
    return repo


@pytest.fixture(scope="module", params=SERVERS)
def server(request: pytest.FixtureRequest, repository: Path) -> Iterator[Endpoint]:
    with serving(
        request.param,
        repository,
        [],
        sonic_args=["--model-control-mode", "explicit"],
        triton_args=["--model-control-mode=explicit"],
        http=False,
    ) as endpoint:
        yield endpoint


def _echo(client: grpcclient.InferenceServerClient, model: str, **options: Any) -> tuple[Any, Any]:
    tensor = grpcclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.zeros(1, dtype=np.float32))
    result = client.infer(model, [tensor], **options)
    first = result.as_numpy("P" if model.endswith("_ens") else "PARAMETERS")[0]
    second = result.as_numpy("S" if model.endswith("_ens") else "SEQUENCE")[0]
    return json.loads(first), json.loads(second)


@pytest.mark.parametrize("model", ["echo_ens", "bls_forward"])
def test_sequence_id_flags_timeout_and_custom_parameters_reach_the_step(server: Endpoint, model: str) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        client.load_model(model)
        seen = _echo(
            client,
            model,
            sequence_id=42,
            sequence_start=True,
            sequence_end=True,
            priority=1,
            timeout=5_000_000,
            parameters=CUSTOM,
        )
        # The step sees only the custom parameters; the sequence ones as its id and flags (START 1 + END 2).
        assert seen == (CUSTOM, [42, 3, 5_000_000])
        assert _echo(client, model, sequence_id=7, sequence_end=True) == ({}, [7, 2, 0])
        assert _echo(client, model) == ({}, [0, 0, 0])


def test_string_sequence_id_reaches_the_step(server: Endpoint) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        client.load_model("echo_ens")
        assert _echo(client, "echo_ens", sequence_id="run-7", parameters={"x": True}) == (
            {"x": True},
            ["run-7", 0, 0],
        )


def _load_error(client: grpcclient.InferenceServerClient, model: str) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        client.load_model(model)
    return info.value


def _state(client: grpcclient.InferenceServerClient, model: str) -> tuple[str, str]:
    rows = [row for row in client.get_model_repository_index().models if row.name == model]
    return (rows[0].state, rows[0].reason) if rows else ("", "")


def test_an_ensemble_whose_step_cannot_load_does_not_load(server: Endpoint) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        error = _load_error(client, "broken_ens")
        assert error.status() == "StatusCode.INVALID_ARGUMENT"
        message = str(error.message())
        assert (
            "ensemble 'broken_ens' depends on 'broken' which has no loaded version. Model 'broken' loading "
            in (message)
        )
        assert "no GPU here" in message
        assert not client.is_model_ready("broken_ens")
        assert _state(client, "broken")[0] == "UNAVAILABLE"  # loading the ensemble tried its step
        error = _load_error(client, "missing_ens")
        assert error.status() == "StatusCode.INVALID_ARGUMENT"
        assert "ensemble missing_ens contains models that are not available or ambiguous: nowhere" in str(
            error.message()
        )
        assert not client.is_model_ready("missing_ens")
        with pytest.raises(InferenceServerException) as info:
            _echo(client, "broken_ens")
        assert info.value.status() == "StatusCode.NOT_FOUND"


def test_a_step_unloads_and_reloads_its_ensemble(server: Endpoint) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        client.unload_model("echo_ens")
        client.unload_model("echo_parameters")
        client.load_model("echo_ens")  # loads its step model first
        assert client.is_model_ready("echo_parameters")
        assert client.is_model_ready("echo_ens")

        client.unload_model("echo_parameters")
        assert not client.is_model_ready("echo_ens")
        assert _state(client, "echo_ens") == ("UNAVAILABLE", "unloaded")
        with pytest.raises(InferenceServerException) as info:
            _echo(client, "echo_ens")
        assert info.value.status() == "StatusCode.NOT_FOUND"
        assert "Request for unknown model: 'echo_ens' has no available versions" in str(info.value.message())

        client.load_model("echo_parameters")
        assert client.is_model_ready("echo_ens")  # back with its step
        assert _echo(client, "echo_ens") == ({}, [0, 0, 0])

        client.unload_model("echo_ens")
        assert client.is_model_ready("echo_parameters")  # the step stays
        assert not client.is_model_ready("echo_ens")


def test_unloading_an_ensemble_with_its_dependents_keeps_the_steps_another_one_calls(
    server: Endpoint,
) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        client.unload_model("echo_parameters")  # from now on loaded only as a step of the ensembles
        client.load_model("echo_ens")
        client.load_model("echo_ens2")
        client.unload_model("echo_ens", unload_dependents=True)
        assert client.is_model_ready("echo_parameters")  # echo_ens2 still calls it
        assert client.is_model_ready("echo_ens2")
        client.unload_model("echo_ens2", unload_dependents=True)
        assert not client.is_model_ready("echo_ens2")
        # Triton answers before its step has finished unloading (UNLOADING); sonic once it has.
        assert _state(client, "echo_parameters")[0] in {"UNLOADING", "UNAVAILABLE"}

        client.load_model("echo_parameters")  # on request: stays when its ensemble goes with its dependents
        client.load_model("echo_ens")
        client.unload_model("echo_ens", unload_dependents=True)
        assert client.is_model_ready("echo_parameters")
        assert _state(client, "echo_parameters") == ("READY", "")


def test_at_start_up_an_ensemble_is_ready_only_with_its_steps(repository: Path) -> None:
    # sonic only: Triton started this way reports itself not ready (a model failed) and lists the
    # ensembles that could not load with no state at all; sonic lists them UNAVAILABLE, with the reason.
    # Both would end start-up by default (--exit-on-error): the failures are what this test reads.
    with (
        ServerProcess.start([repository], extra_args=["--exit-on-error=false"]) as process,
        grpcclient.InferenceServerClient(process.grpc_address) as client,
    ):
        assert client.is_model_ready("echo_ens")  # listed before its step: loaded it first
        assert _echo(client, "echo_ens", sequence_id=5) == ({}, [5, 0, 0])
        assert not client.is_model_ready("broken_ens")
        state, reason = _state(client, "broken_ens")
        assert state == "UNAVAILABLE"
        assert reason.startswith("ensemble 'broken_ens' depends on 'broken' which has no loaded version.")
        assert "no GPU here" in reason
        assert not client.is_model_ready("missing_ens")
        assert _state(client, "missing_ens")[1].startswith(
            "ensemble missing_ens contains models that are not available"
        )
