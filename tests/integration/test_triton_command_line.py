"""``sonic serve`` started with tritonserver's own command line, as launchers written for Triton do."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration

TRITON_STYLE = [
    "--log-verbose=1",
    "--log-error=1",
    "--log-warning=1",
    "--log-info=1",
    "--strict-model-config=false",
    "--allow-gpu-metrics",
    "--exit-on-error=true",
    "--backend-config=onnxruntime,enable-global-threadpool=1",
    "--pinned-memory-pool-byte-size=268435456",
    "--allow-http",
    "true",
    "--http-port=0",
    "--id=triton-flags",
]


def test_serve_runs_with_tritons_flags(test_repository: Path, tmp_path: Path) -> None:
    repository = tmp_path / "models"
    shutil.copytree(test_repository / "identity", repository / "identity")
    with ServerProcess.start([repository], extra_args=TRITON_STYLE) as process:
        with grpcclient.InferenceServerClient(process.grpc_address) as client:
            assert client.get_server_metadata().name == "triton-flags"
            tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
            tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
            result = client.infer("identity", [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.ones((1, 16), np.float32))
        assert process.http_address
        log = process.log_path.read_text(encoding="utf-8")
    assert "--allow-gpu-metrics=true accepted, no effect here" in log
    assert "--pinned-memory-pool-byte-size=268435456 accepted, no effect here" in log


def _serve(repository: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sonic.cli.main", "serve", "--grpc-port", "0", "--model-repository"]
    return subprocess.run(
        [*command, str(repository), *argv], capture_output=True, text=True, timeout=120, check=False
    )


def test_exit_on_error_stops_start_up_when_a_model_fails(test_repository: Path, tmp_path: Path) -> None:
    repository = tmp_path / "models"
    shutil.copytree(test_repository / "identity", repository / "identity")
    (repository / "identity" / "config.pbtxt").write_text("max_batch_size: oops", encoding="utf-8")
    result = _serve(repository, "--exit-on-error=true")
    assert result.returncode == 1
    assert "error: creating server: Internal - failed to load all models" in result.stderr.splitlines()
    assert "model 'identity'" in result.stderr  # then which model, and why
    assert "sonic: ready" not in result.stdout


def test_a_flag_we_cannot_honour_is_refused(tmp_path: Path) -> None:
    result = _serve(tmp_path, "--model-namespacing=true")
    assert result.returncode == 2
    assert "--model-namespacing=true is not supported by sonic serve: model names are global" in result.stderr


def test_log_file_takes_the_logs_and_stdout_keeps_the_ready_line(
    test_repository: Path, tmp_path: Path
) -> None:
    repository = tmp_path / "models"
    shutil.copytree(test_repository / "identity", repository / "identity")
    log_file = tmp_path / "triton.log"
    args = [f"--log-file={log_file}", "--log-verbose=1", "--allow-gpu-metrics"]
    with ServerProcess.start([repository], extra_args=args) as process:
        with grpcclient.InferenceServerClient(process.grpc_address) as client:
            assert client.is_model_ready("identity")
        stderr = process.log_path.read_text(encoding="utf-8")
    logged = log_file.read_text(encoding="utf-8")
    assert "--allow-gpu-metrics=true accepted, no effect here" in logged
    assert "identity" in logged  # the model's load
    assert "accepted, no effect here" not in stderr


def test_a_log_file_that_cannot_be_opened_is_refused(test_repository: Path, tmp_path: Path) -> None:
    result = _serve(test_repository, f"--log-file={tmp_path / 'missing' / 'x.log'}")
    assert result.returncode == 2
    assert "--log-file" in result.stderr
    assert "No such file or directory" in result.stderr
