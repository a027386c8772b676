"""Model repositories for the workflow tests, and one `sonic serve` over them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sonic.demos.common import build_models
from sonic.launch import ServerProcess
from sonic.models.simple import write_sample_repository

DELAY_S = 0.2

# The delay stands for a coprocessor's time per execution: the device works while this host's CPU
# stays free, which is what lets other streams overlap with it. Four instances run at once.
DELAY_MODEL = """
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.delay_s = float(config["parameters"]["delay_s"]["string_value"])

    def execute(self, requests):
        time.sleep(self.delay_s)  # emulated device time, not synchronisation
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", x * 2)]))
        return responses
"""

DELAY_CONFIG = f"""
name: "delay"
backend: "python"
max_batch_size: 64
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 4 }} ]
parameters {{ key: "delay_s" value {{ string_value: "{DELAY_S}" }} }}
"""


@pytest.fixture
def delay_s() -> float:
    """Seconds each execution of the ``delay`` model takes."""
    return DELAY_S


@pytest.fixture(scope="session")
def workflow_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_sample_repository(tmp_path_factory.mktemp("workflow-models"))  # identity, add_sub
    (root / "delay" / "1").mkdir(parents=True)
    (root / "delay" / "1" / "model.py").write_text(DELAY_MODEL)
    (root / "delay" / "config.pbtxt").write_text(DELAY_CONFIG)
    return root


@pytest.fixture(scope="session")
def workflow_server(workflow_repository: Path) -> Iterator[ServerProcess]:
    with ServerProcess.start([workflow_repository]) as process:
        yield process


@pytest.fixture(scope="session")
def demo_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demonstrators' reference models, built once for the demo and Dask tests."""
    root = tmp_path_factory.mktemp("demo-models")
    names = ["emtrk_michel", "facile", "particlenet_ak4", "particlenet_ak8", "deepmet", "deeptau"]
    return build_models(root, names, no_batching=["emtrk_michel", "facile"])
