"""A repository for the perf toolkit tests and one `sonic serve` over it; NVIDIA's perf_analyzer."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from sonic.launch import ServerProcess
from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.models.testing import slow_model, variable_dims_model
from sonic.perf.engine import MeasurementConfig
from sonic.perf.synthetic import write_fixed_cost_repository

SLOW_CONFIG = """
name: "slow"
backend: "onnxruntime"
max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 512 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 512 ] } ]
# One instance: the tests count one execution at a time (onnxruntime CPU groups default to two).
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

VARIABLE_CONFIG = """
name: "variable_dims"
backend: "onnxruntime"
max_batch_size: 16
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""

# Short windows: the tests check structure and counts, not figures for the record.
QUICK = MeasurementConfig(window_s=0.5, stability_percentage=50.0, stable_windows=2, max_windows=3)


def build_perf_repository(root: Path) -> Path:
    for name, config, build in (
        ("slow", SLOW_CONFIG, slow_model),
        ("identity", IDENTITY_CONFIG, identity_model),
        ("variable_dims", VARIABLE_CONFIG, variable_dims_model),
    ):
        build(root / name / "1" / "model.onnx")
        (root / name / "config.pbtxt").write_text(config.lstrip())
    # a fixed cost of 10-20 ms per execution, far above the load generator's own cost per request: batching
    # 16 waiting requests wins by several times even when the generator is slowed by other work
    return write_fixed_cost_repository(root, depth=48)


@pytest.fixture(scope="session")
def perf_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_perf_repository(tmp_path_factory.mktemp("perf-repository"))


@pytest.fixture(scope="session")
def perf_server(perf_repository: Path) -> Iterator[ServerProcess]:
    with ServerProcess.start([perf_repository]) as process:
        yield process


PERF_ANALYZER_DIR = Path(__file__).resolve().parents[3] / ".tools" / "perf_analyzer"


@dataclass(frozen=True)
class PerfAnalyzer:
    """The perf_analyzer binary of the tritonclient 2.51.0 wheel and the environment it runs in."""

    binary: Path
    env: dict[str, str]


@pytest.fixture
def perf_analyzer() -> PerfAnalyzer:
    """Skips when the binary is absent: ``tools/install-perf-analyzer.sh`` (``./dev test`` runs it) unpacks
    it with libb64; libcudart comes from the ``nvidia-cuda-runtime-cu12`` wheel in the test group."""
    binary = PERF_ANALYZER_DIR / "bin" / "perf_analyzer"
    if not binary.is_file():
        pytest.skip("no perf_analyzer: run tools/install-perf-analyzer.sh (./dev test does)")
    spec = importlib.util.find_spec("nvidia.cuda_runtime")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("no libcudart: pip install nvidia-cuda-runtime-cu12 (test dependency group)")
    cudart = Path(next(iter(spec.submodule_search_locations))) / "lib"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(PERF_ANALYZER_DIR / "lib"), str(cudart), env.get("LD_LIBRARY_PATH")) if p
    )
    return PerfAnalyzer(binary, env)


def success_count(address: str, model: str) -> int:
    """The successful inferences the server at ``address`` counted for ``model`` (its statistics)."""
    client = grpcclient.InferenceServerClient(address)
    try:
        stats = client.get_inference_statistics(model, as_json=True)
    finally:
        client.close()
    return sum(int(s["inference_stats"]["success"].get("count", 0)) for s in stats["model_stats"])
