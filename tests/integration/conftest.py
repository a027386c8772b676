"""A model repository covering the protocol's corners, and `sonic serve` processes over it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.triton_helpers import SERVE_BROKEN_TOO

from sonic.launch import ServerProcess
from sonic.models.simple import identity_model, write_sample_repository
from sonic.models.testing import fixed_shape_model, slow_model, string_identity_model, variable_dims_model
from sonic.testing import chromium


def _model(root: Path, name: str, config: str | None, build, versions: tuple[int, ...] = (1,)) -> None:  # type: ignore[no-untyped-def]
    for version in versions:
        build(root / name / str(version) / "model.onnx")
    if config is not None:
        (root / name / "config.pbtxt").write_text(config)


SLOW_BATCHING = """
max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 512 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 512 ] } ]
# One instance: requests must queue behind a slow batch (onnxruntime CPU groups default to two).
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def checksum_agent(md5: str) -> str:
    """The section CMS's repositories carry: the checksum agent verifies ``1/model.onnx`` at each load."""
    return f"""
model_repository_agents {{
  agents [ {{ name: "checksum" parameters {{ key: "MD5:1/model.onnx" value: "{md5}" }} }} ]
}}
"""


def build_test_repository(root: Path) -> Path:
    write_sample_repository(root)  # identity (dynamic batching, max 1024), add_sub (max 8, no batcher)
    _model(
        root,
        "variable_dims",
        'backend: "onnxruntime"\nmax_batch_size: 16\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        "dynamic_batching { max_queue_delay_microseconds: 100000 }\n",
        variable_dims_model,
    )
    _model(
        root,
        "strings",
        'backend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 2 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 2 ] } ]\n',
        string_identity_model,
    )
    _model(root, "fixed", 'platform: "onnxruntime_onnx"\nmax_batch_size: 0\n', fixed_shape_model)
    _model(root, "autocomplete", None, identity_model)
    _model(
        root,
        "batching",
        'backend: "onnxruntime"\nmax_batch_size: 64\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        "dynamic_batching { max_queue_delay_microseconds: 100000 }\n",
        identity_model,
    )
    _model(
        root,
        "versions",
        'backend: "onnxruntime"\nmax_batch_size: 4\nversion_policy { latest { num_versions: 2 } }\n',
        identity_model,
        versions=(1, 2, 3),
    )
    _model(root, "slow", SLOW_BATCHING + "dynamic_batching { }\n", slow_model)
    _model(
        root,
        "queue_limited",
        SLOW_BATCHING + "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n",
        slow_model,
    )
    _model(
        root,
        "timeout",
        SLOW_BATCHING + "dynamic_batching { default_queue_policy { default_timeout_microseconds: 2000 } }\n",
        slow_model,
    )
    _model(root, "checksum", None, identity_model)
    md5 = hashlib.md5(
        (root / "checksum" / "1" / "model.onnx").read_bytes(), usedforsecurity=False
    ).hexdigest()
    (root / "checksum" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 4\n' + checksum_agent(md5)
    )
    _model(
        root,
        "chunked",
        'backend: "onnxruntime"\nmax_batch_size: 64\n'
        'parameters { key: "max_execution_batch_size" value { string_value: "3" } }\n',
        variable_dims_model,
    )
    return root


def build_broken_repository(root: Path) -> Path:
    """Two models that fail to load: a config.pbtxt that does not parse, and a model file that is not ONNX."""
    _model(
        root,
        "broken_config",
        'backend: "onnxruntime"\nmax_batch_size: 4\ninput [ { name: "X" ',
        identity_model,
    )
    broken = root / "broken_model" / "1"
    broken.mkdir(parents=True)
    (broken / "model.onnx").write_bytes(b"this is not an onnx file")
    (root / "broken_model" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
    )
    return root


@pytest.fixture(scope="session")
def test_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Models that all load (a server of them alone starts with Triton's defaults)."""
    return build_test_repository(tmp_path_factory.mktemp("repository"))


@pytest.fixture(scope="session")
def broken_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_broken_repository(tmp_path_factory.mktemp("broken"))


@pytest.fixture(scope="session", params=["h2", "grpcio"])
def server(
    request: pytest.FixtureRequest, test_repository: Path, broken_repository: Path
) -> Iterator[ServerProcess]:
    """One `sonic serve` (model control mode none) shared by the read-mostly tests, once per gRPC stack."""
    args = ["--grpc-server", request.param, *SERVE_BROKEN_TOO]
    with ServerProcess.start([test_repository, broken_repository], extra_args=args) as process:
        yield process


@pytest.fixture
def explicit_server(test_repository: Path, broken_repository: Path) -> Iterator[ServerProcess]:
    args = ["--model-control-mode", "explicit", *SERVE_BROKEN_TOO]
    with ServerProcess.start([test_repository, broken_repository], extra_args=args) as process:
        yield process


@pytest.fixture
def fresh_server(test_repository: Path) -> Iterator[ServerProcess]:
    """A server of its own, for tests that stop it or read exact statistics."""
    process = ServerProcess.start([test_repository])
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
def browser() -> Path:
    """Debian's chromium, unpacked under .cache/ by tools/install-chromium.sh on first use."""
    return chromium.install(Path(__file__).resolve().parents[2])
