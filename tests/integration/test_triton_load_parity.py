"""Model-control overrides and requested version strings, asked of ``sonic serve`` and real Triton 2.51.

Both servers run in explicit model-control mode over the same Python-backend model. The assertions
are Triton's answers; the one documented difference (docs/security.md) is
the status of an override that does not parse: Triton answers INTERNAL / 500, sonic INVALID_ARGUMENT /
400 with Triton's words and then what is wrong.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.integration.triton_helpers import SERVERS, Endpoint, python_model_repository, serving
from tritonclient.utils import InferenceServerException

pytestmark = [pytest.mark.integration]

# No auto_complete_config and no use of the config: any override of it loads.
NOOP = """class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        return []
"""
CONFIG = """backend: "python"
input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "B" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
ORIGINAL = {
    "backend": "python",
    "input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [2]}],
    "output": [{"name": "B", "data_type": "TYPE_FP32", "dims": [2]}],
}
BAD_VERSION = (
    "failed to get model version from specified version string 'wrong_specification' (details: stol), "
    "version should be an integral value > 0"
)
NEGATIVE_VERSION = "invalid model version specified '-1' , version should be an integral value > 0"


POLL_FAILED = "failed to poll from model repository"
CHECKED_KEY = "MD5:1/model.py"
NOOP_MD5 = hashlib.md5(NOOP.encode(), usedforsecurity=False).hexdigest()
WRONG_MD5 = "0" * 32


def _agents(name: str, key: str, value: str) -> str:
    return f'model_repository_agents {{ agents [ {{ name: "{name}" parameters {{ key: "{key}" value: "{value}" }} }} ] }}\n'


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = python_model_repository(tmp_path_factory.mktemp("load_parity"), "plain", CONFIG, NOOP)
    for name, agent, value in [("checked", "checksum", WRONG_MD5), ("encrypted", "encrypt", "x")]:
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.py").write_text(NOOP, encoding="utf-8")
        (repository / name / "config.pbtxt").write_text(
            CONFIG + _agents(agent, CHECKED_KEY, value), encoding="utf-8"
        )
    return repository


@pytest.fixture(scope="module", params=SERVERS)
def server(request: pytest.FixtureRequest, repository: Path) -> Iterator[Endpoint]:
    with serving(
        request.param,
        repository,
        ["plain"],
        sonic_args=["--model-control-mode", "explicit", "--load-model", "plain"],
        triton_args=["--model-control-mode=explicit", "--load-model=plain"],
    ) as endpoint:
        yield endpoint


def _config(server: Endpoint) -> dict[str, Any]:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        config: dict[str, Any] = client.get_model_config("plain", as_json=True)["config"]
    return config


def _load(server: Endpoint, protocol: str, config: str | None = None) -> None:
    _load_model(server, protocol, "plain", config)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_override_replaces_the_whole_configuration(server: Endpoint, protocol: str) -> None:
    _load(server, protocol, json.dumps({"max_batch_size": 16}))
    try:
        config = _config(server)
        # Nothing of config.pbtxt is left: no input, no output; the backend is found from model.py.
        assert config["max_batch_size"] == 16
        assert "input" not in config
        assert "output" not in config
        assert config["backend"] == "python"
        assert config["default_model_filename"] == "model.py"
        _load(server, protocol)  # the files have not changed: the override keeps serving
        assert _config(server)["max_batch_size"] == 16
    finally:
        _load(server, protocol, json.dumps(ORIGINAL))  # back to config.pbtxt's content
    assert [i["name"] for i in _config(server)["input"]] == ["A"]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize(
    "override",
    ["{not json", '{"nosuch": 1}', '{"max_batch_size": "x"}', '{"name": "other"}', "[1]"],
    ids=["syntax", "unknown-field", "wrong-type", "other-name", "not-an-object"],
)
def test_unusable_override_in_tritons_words(server: Endpoint, protocol: str, override: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        _load(server, protocol, override)
    assert info.value.message().startswith("failed to load 'plain', failed to poll from model repository")
    # The one difference: Triton calls its client's mistake an internal error.
    expected = {
        ("triton", "grpc"): "StatusCode.INTERNAL",
        ("triton", "http"): "500",
        ("sonic", "grpc"): "StatusCode.INVALID_ARGUMENT",
        ("sonic", "http"): "400",
    }
    assert info.value.status() == expected[server.kind, protocol]
    assert [i["name"] for i in _config(server)["input"]] == ["A"]  # the serving configuration is untouched


def _grpc_calls() -> dict[str, Callable[[grpcclient.InferenceServerClient, str], object]]:
    def infer(client: grpcclient.InferenceServerClient, version: str) -> object:
        tensor = grpcclient.InferInput("A", [2], "FP32")
        tensor.set_data_from_numpy(np.zeros(2, np.float32))
        return client.infer("plain", [tensor], model_version=version)

    return {
        "infer": infer,
        "metadata": lambda c, v: c.get_model_metadata("plain", model_version=v),
        "ready": lambda c, v: c.is_model_ready("plain", model_version=v),
        "config": lambda c, v: c.get_model_config("plain", model_version=v),
        "statistics": lambda c, v: c.get_inference_statistics("plain", model_version=v),
    }


@pytest.mark.parametrize("call", list(_grpc_calls()))
@pytest.mark.parametrize(
    ("version", "message"), [("wrong_specification", BAD_VERSION), ("-1", NEGATIVE_VERSION)]
)
def test_grpc_version_strings(server: Endpoint, call: str, version: str, message: str) -> None:
    with (
        grpcclient.InferenceServerClient(server.grpc) as client,
        pytest.raises(InferenceServerException) as info,
    ):
        _grpc_calls()[call](client, version)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == message


@pytest.mark.parametrize("suffix", ["", "/ready", "/config", "/stats"])
@pytest.mark.parametrize("version", ["wrong_specification", "-1", "+1"])
def test_http_version_segment_must_be_digits(server: Endpoint, suffix: str, version: str) -> None:
    with httpclient.InferenceServerClient(server.http) as client:
        response = client._get(f"v2/models/plain/versions/{version}{suffix}", None, None)
        assert response.status_code == 404
        good = client._get(f"v2/models/plain/versions/00001{suffix}", None, None)
        assert good.status_code == 200


POLL_STATUS = {  # the documented difference (poll-failure-status): Triton calls a load it refuses internal
    ("triton", "grpc"): "StatusCode.INTERNAL",
    ("triton", "http"): "500",
    ("sonic", "grpc"): "StatusCode.INVALID_ARGUMENT",
    ("sonic", "http"): "400",
}


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("where", ["config.pbtxt", "override"])
def test_an_agent_that_cannot_be_found_fails_the_load(server: Endpoint, protocol: str, where: str) -> None:
    """Triton answers only its poll words (the agent's name and the folder searched are in its log); sonic
    says what is wrong after them, in the words Triton logs."""
    name, override = "encrypted", None
    if where == "override":
        name = "plain"
        override = json.dumps({**ORIGINAL, "model_repository_agents": {"agents": [{"name": "encrypt"}]}})
    with pytest.raises(InferenceServerException) as info:
        _load_model(server, protocol, name, override)
    expected = f"failed to load '{name}', {POLL_FAILED}"
    if server.kind == "sonic":
        expected += (
            ": unable to find 'libtritonrepoagent_encrypt.so' for repo agent 'encrypt', searched: "
            "/opt/tritonserver/repoagents (sonic runs only the built-in 'checksum' repository agent)"
        )
    assert (info.value.status(), info.value.message()) == (POLL_STATUS[server.kind, protocol], expected)
    assert [i["name"] for i in _config(server)["input"]] == ["A"]  # "plain" still serves config.pbtxt's


def test_checksums_are_verified_at_every_load(server: Endpoint, repository: Path) -> None:
    """sonic runs the checksum agent as Triton's containers do: a mismatch refuses the load in the agent's
    words (gRPC, HTTP, and the index's reason), the right MD5 loads. The Triton here has no agent to run
    (no repoagents folder): it refuses both (docs/triton-differences.md, checksum-agent-built-in)."""
    mismatch = f"Mismatched MD5 hash for file 1/model.py, expect: {WRONG_MD5}, got: {NOOP_MD5}"
    poll_failed = f"failed to load 'checked', {POLL_FAILED}"
    for protocol in ("grpc", "http"):
        with pytest.raises(InferenceServerException) as info:
            _load_model(server, protocol, "checked")
        sonic = (POLL_STATUS["sonic", protocol], f"{poll_failed}: {mismatch}")
        triton = (POLL_STATUS["triton", protocol], poll_failed)
        assert (info.value.status(), info.value.message()) == (sonic if server.kind == "sonic" else triton)
    with grpcclient.InferenceServerClient(server.grpc) as client:
        (entry,) = [m for m in client.get_model_repository_index().models if m.name == "checked"]
        assert not client.is_model_ready("checked")
    if server.kind == "sonic":
        assert (entry.state, entry.reason) == ("UNAVAILABLE", f"{poll_failed}: {mismatch}")
    config = repository / "checked" / "config.pbtxt"
    config.write_text(CONFIG + _agents("checksum", CHECKED_KEY, NOOP_MD5), encoding="utf-8")
    try:
        if server.kind == "sonic":
            _load_model(server, "http", "checked")
            with grpcclient.InferenceServerClient(server.grpc) as client:
                assert client.is_model_ready("checked")
                client.unload_model("checked")
        else:
            with pytest.raises(InferenceServerException) as info:
                _load_model(server, "grpc", "checked")
            assert info.value.message() == poll_failed
    finally:
        config.write_text(CONFIG + _agents("checksum", CHECKED_KEY, WRONG_MD5), encoding="utf-8")


def _load_model(server: Endpoint, protocol: str, name: str, config: str | None = None) -> None:
    if protocol == "grpc":
        with grpcclient.InferenceServerClient(server.grpc) as client:
            client.load_model(name, config=config)
    else:
        with httpclient.InferenceServerClient(server.http) as client:
            client.load_model(name, config=config)
