"""``sonic validate`` between real Triton 2.51 and ``sonic serve`` on the same Python-backend models: every
output agrees exactly, and a request both refuse is refused with the same status (and words that differ
only as docs/triton-differences.md says)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.integration.traffic.trace import record, write_records
from tests.integration.triton_helpers import running_triton
from tests.integration.validate.conftest import run_validate

from sonic.launch import ServerProcess
from sonic.models.testing import CLASSIFIER_CONFIG, classifier_model
from sonic.testing.repository import MODELS, python_model_source, write_test_repository

pytestmark = [pytest.mark.integration, pytest.mark.triton]

NAMES = ("identity", "identity_fp16", "identity_bool", "identity_int64", "nobatch")


def _repository(root: Path) -> Path:
    write_test_repository(root, "triton", tuple(m for m in MODELS if m.name in NAMES))
    onnx_path = root / "classifier" / "1" / "model.onnx"
    classifier_model(onnx_path)
    config = CLASSIFIER_CONFIG.format(features=32, classes=5).replace('"onnxruntime"', '"python"')
    (root / "classifier" / "config.pbtxt").write_text(config)
    (root / "classifier" / "1" / "model.py").write_text(python_model_source(onnx_path))
    return root


def _trace(directory: Path) -> int:
    rng = np.random.default_rng(5)
    inputs: list[tuple[str, dict[str, tuple[str, np.ndarray]]]] = []  # type: ignore[type-arg]
    for batch in (1, 3):
        inputs += [
            ("identity", {"INPUT0": ("FP32", rng.standard_normal((batch, 16)).astype(np.float32))}),
            ("identity_fp16", {"INPUT0": ("FP16", rng.standard_normal((batch, 7)).astype(np.float16))}),
            ("identity_bool", {"INPUT0": ("BOOL", rng.random((batch, 4)) < 0.5)}),
            ("identity_int64", {"INPUT0": ("INT64", rng.integers(-(2**40), 2**40, (batch, 3, 2)))}),
            ("classifier", {"INPUT0": ("FP32", rng.standard_normal((batch, 32)).astype(np.float32))}),
        ]
    inputs.append(("nobatch", {"INPUT0": ("FP32", rng.standard_normal((2, 3)).astype(np.float32))}))
    inputs.append(("identity", {"INPUT0": ("FP32", np.zeros((1, 15), np.float32))}))  # refused by both
    records = [
        record(i * 3.0, model, tensors, request_id=f"q{i}") for i, (model, tensors) in enumerate(inputs)
    ]
    write_records(directory, records)
    return len(records)


def test_triton_and_sonic_serve_agree_exactly_on_python_backend_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repository = _repository(tmp_path / "models")
    requests = _trace(tmp_path / "trace")
    names = [*NAMES, "classifier"]
    trace = ["--traffic", str(tmp_path / "trace")]
    with (
        running_triton([repository], names) as triton,
        ServerProcess.start([repository], extra_args=["--http-port", "0"]) as sonic,
    ):
        exact = run_validate(tmp_path / "exact", capsys, *trace, "--reference", triton.grpc_address,
                             "--candidate", sonic.grpc_address)  # fmt: skip
        grpc = run_validate(tmp_path / "grpc", capsys, *trace, "--messages", "status",
                            "--reference", triton.grpc_address, "--candidate", sonic.grpc_address)  # fmt: skip
        http = run_validate(tmp_path / "http", capsys, *trace, "--messages", "status",
                            "--reference", f"http://{triton.http_address}",
                            "--candidate", sonic.grpc_address)  # fmt: skip
    # Word for word, the refusal differs as docs/triton-differences.md says (error-context): sonic says
    # where first, then Triton's words without its NOTE on batch dimensions. The tool shows both.
    assert exact.code == 1
    assert exact.report["models"]["identity"]["status_mismatches"] == 1
    what = exact.report["models"]["identity"]["examples"][0]["what"]
    assert "reference INVALID_ARGUMENT: [request id: q11] unexpected shape for input 'INPUT0'" in what
    assert "candidate INVALID_ARGUMENT: [request id: q11] model 'identity' version 1 input 'INPUT0'" in what
    for done in (grpc, http):
        assert done.code == 0, done.stdout + done.stderr
        assert done.report["requests"] == requests
        assert set(done.report["models"]) == set(names)
        identity = done.report["models"]["identity"]
        assert identity["both_failed"] == 1  # the wrong shape: the same status from both
        for model in done.report["models"].values():
            assert model["status_mismatches"] == 0
            for output in model["outputs"].values():
                assert output["passed"]
                assert output["elements_outside"] == 0
    probabilities = grpc.report["models"]["classifier"]["outputs"]["PROBABILITIES"]
    assert probabilities["max_ulp"] == 0.0
    assert probabilities["argmax_agreement"] == 1.0
