"""A repository for the perf toolkit tests and one `sonic serve` over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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
