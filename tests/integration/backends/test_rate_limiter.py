"""Triton's rate limiter and passive instances, on ``sonic serve`` and on real NVIDIA Triton 2.51.

Two Python models need the one copy of resource ``R`` (``--rate-limit-resource=R:1``): with the rate limiter
on they never run at the same time (each fails a request if it finds the other running). A model that needs
two copies fails to load in Triton's words; a model with a passive and an active group serves.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tests.integration.triton_helpers import SERVERS, Endpoint, serving
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess

pytestmark = [pytest.mark.integration]

PYTHON_MODELS = Path(__file__).parent / "python_models"
RATE_LIMIT_ARGS = ["--rate-limit=execution_count", "--rate-limit-resource=R:1", "--exit-on-error=false"]
SERVED = ["rl_a", "rl_b", "mixed", "passive_only"]
TOO_BIG = 'Resource count for "R" is limited to 1 which will prevent scheduling of one or more model instances, the minimum required count is 2'


def _config(name: str, groups: str, marker_dir: Path) -> str:
    return f"""name: "{name}"
backend: "python"
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 2 ] }} ]
instance_group [ {groups} ]
parameters {{ key: "marker_dir" value: {{ string_value: "{marker_dir}" }} }}
parameters {{ key: "work_s" value: {{ string_value: "0.02" }} }}
"""


def _needs(count: int, priority: int) -> str:
    return f'{{ kind: KIND_CPU count: 1 rate_limiter {{ resources [ {{ name: "R" count: {count} }} ] priority: {priority} }} }}'


def _repository(root: Path) -> Path:
    repo = root / "models"
    marker_dir = root / "markers"
    marker_dir.mkdir()
    groups = {
        "rl_a": _needs(1, 1),
        "rl_b": _needs(1, 2),
        "too_big": _needs(2, 1),
        "mixed": "{ kind: KIND_CPU count: 1 passive: true }, { kind: KIND_CPU count: 1 }",
        "passive_only": "{ kind: KIND_CPU count: 1 passive: true }",
    }
    for name, group in groups.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(_config(name, group, marker_dir), encoding="utf-8")
        (repo / name / "1" / "model.py").write_bytes((PYTHON_MODELS / "exclusive.py").read_bytes())
    return repo


@pytest.fixture(scope="module", params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    repository = _repository(tmp_path_factory.mktemp("ratelimit"))
    with serving(
        request.param,
        repository,
        SERVED,
        sonic_args=RATE_LIMIT_ARGS,
        # Not strictly ready with a model that failed to load: the launcher waits for server readiness.
        triton_args=[*RATE_LIMIT_ARGS, "--strict-readiness=false"],
        http=False,
    ) as endpoint:
        yield endpoint


def _infer(address: str, model: str) -> npt.NDArray[np.float32]:
    with grpcclient.InferenceServerClient(address) as client:
        tensor = grpcclient.InferInput("INPUT", [2], "FP32")
        tensor.set_data_from_numpy(np.arange(2, dtype=np.float32))
        result = client.infer(model, [tensor], client_timeout=60)
        output = result.as_numpy("OUTPUT")
        assert output is not None
        return np.asarray(output, dtype=np.float32)


def _overlaps(address: str, models: list[str]) -> list[str]:
    """Errors of concurrent requests to ``models`` (each model reports finding another one running)."""
    errors = []
    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(_infer, address, model) for model in models * 12]
        for future in futures:
            try:
                np.testing.assert_array_equal(future.result(), [1.0, 2.0])
            except InferenceServerException as exc:
                errors.append(str(exc.message()))
    return errors


def test_models_sharing_one_resource_copy_never_run_together(server: Endpoint) -> None:
    assert _overlaps(server.grpc, ["rl_a", "rl_b"]) == []


def test_a_model_needing_more_than_the_pool_fails_to_load_in_tritons_words(server: Endpoint) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        index = {row["name"]: row for row in client.get_model_repository_index(as_json=True)["models"]}
    assert index["too_big"]["state"] == "UNAVAILABLE"
    assert TOO_BIG in index["too_big"]["reason"]


def test_passive_group_is_loaded_and_shown_and_the_active_one_serves(server: Endpoint) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        groups = client.get_model_config("mixed", as_json=True)["config"]["instance_group"]
        assert client.is_model_ready("passive_only")
    assert [group.get("passive", False) for group in groups] == [True, False]
    np.testing.assert_array_equal(_infer(server.grpc, "mixed"), [1.0, 2.0])


def test_a_model_with_only_passive_instances_answers_unavailable(server: Endpoint) -> None:
    if server.kind == "triton":
        pytest.skip("Triton 2.51 crashes (SIGSEGV) on a request to a model with only passive instances")
    with pytest.raises(InferenceServerException) as info:
        _infer(server.grpc, "passive_only")
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    assert "model 'passive_only' has no active instance: every instance group is passive" in str(info.value)


def test_without_the_rate_limiter_the_same_models_do_overlap(tmp_path: Path) -> None:
    """The control: the marker check does see two models running at once when nothing limits them."""
    repository = _repository(tmp_path)
    with ServerProcess.start([repository], extra_args=["--rate-limit=off"]) as process:
        assert _overlaps(process.grpc_address, ["rl_a", "rl_b"])
