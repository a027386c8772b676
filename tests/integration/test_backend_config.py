"""``sonic serve --backend-config`` as Triton 2.51's (its qa/L0_backend_config): ``default-max-batch-size``,
global or per backend, in the configuration auto-completed for an ONNX model without ``config.pbtxt``; a
setting Triton cannot read stops start-up in its words (compared with the real one where it runs)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from tests.integration.triton_helpers import run_triton_to_exit

from sonic.cli.serve import parse_backend_config_option
from sonic.launch import ServerProcess
from sonic.models.simple import identity_model

pytestmark = pytest.mark.integration

MODEL = "no_config"  # L0_backend_config's name: a model folder with a model file and no config.pbtxt


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("backend_config") / "models"
    identity_model(root / MODEL / "1" / "model.onnx")  # INPUT0/OUTPUT0 FP32 [batch, 16]
    return root


def _config(repository: Path, flags: list[str]) -> dict[str, object]:
    with ServerProcess.start([repository], extra_args=["--http-port", "0", *flags]) as process:
        url = f"http://{process.http_address}/v2/models/{MODEL}/config"
        with urllib.request.urlopen(url, timeout=30) as answer:
            config: dict[str, object] = json.loads(answer.read())
    return config


@pytest.mark.parametrize(
    ("flags", "max_batch_size", "dims"),
    [
        (["--backend-config=onnxruntime,default-max-batch-size=5"], 5, [16]),
        (["--backend-config=onnxruntime,default-max-batch-size=0"], 0, [-1, 16]),  # batching off
        (["--backend-config=default-max-batch-size=7", "--backend-config=default-max-batch-size=8"], 8, [16]),
        (
            [
                "--backend-config=onnxruntime,default-max-batch-size=3",
                "--backend-config=default-max-batch-size=9",
            ],
            3,
            [16],
        ),
    ],
    ids=["onnxruntime-5", "onnxruntime-0", "global-last-wins", "backend-beats-global"],
)
def test_default_max_batch_size_sets_the_auto_completed_max_batch_size(
    repository: Path, flags: list[str], max_batch_size: int, dims: list[int]
) -> None:
    config = _config(repository, flags)
    assert config.get("max_batch_size", 0) == max_batch_size
    assert ("dynamic_batching" in config) is (max_batch_size > 1)  # the batcher only where batches can form
    assert [tensor["dims"] for tensor in config["input"]] == [dims]  # type: ignore[attr-defined]


def _serve(*argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sonic.cli.main", "serve", "--grpc-port", "0", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_a_default_max_batch_size_that_is_not_a_number_fails_the_load_in_tritons_words(
    repository: Path,
) -> None:
    result = _serve("--model-repository", str(repository), "--backend-config=default-max-batch-size=x")
    assert result.returncode == 1
    assert "error: creating server: Internal - failed to load all models" in result.stderr.splitlines()
    assert (
        f"load failed for model '{MODEL}': version 1 is at UNAVAILABLE state: Invalid argument: failed to "
        "convert 'x' to integral number" in result.stderr
    )


# qa/L0_backend_config's NEGATIVE_PARSE_ARGS (r24.10).
NEGATIVE_PARSE_ARGS = [
    ",default-max-batch-size=3",
    "default-max-batch-size=",
    "default-max-batch-size",
    "tensorflow,default-max-batch-size=",
    "tensorflow,default-max-batch-size",
]


def _words(value: str) -> str:
    """What sonic says of a --backend-config it refuses: Triton's words (tests/unit/test_backend_config.py)."""
    with pytest.raises(ValueError, match="--backend-config option format is") as info:
        parse_backend_config_option(value)
    return str(info.value)


@pytest.mark.parametrize(
    "value", [NEGATIVE_PARSE_ARGS[0], NEGATIVE_PARSE_ARGS[2]], ids=["no-backend", "no-value"]
)
def test_a_backend_config_triton_cannot_read_stops_start_up(tmp_path: Path, value: str) -> None:
    result = _serve("--model-repository", str(tmp_path), f"--backend-config={value}")
    assert result.returncode == 2  # as sonic's other refusals of a command line (Triton: 1)
    assert result.stderr.strip().splitlines()[-1] == f"sonic serve: {_words(value)}"
    assert "sonic: ready" not in result.stdout


@pytest.mark.triton
def test_triton_refuses_them_in_the_same_words(tmp_path: Path) -> None:
    for value in NEGATIVE_PARSE_ARGS:
        result = run_triton_to_exit([tmp_path], tmp_path, f"--backend-config={value}")
        assert result.returncode == 1, value
        lines = result.stderr.strip().splitlines()
        assert lines[-2:] == ['Bad option: "--backend-config".', _words(value)], value  # after its usage text
