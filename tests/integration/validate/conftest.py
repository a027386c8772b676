"""Model repositories and a recorded trace for ``sonic validate``'s end-to-end tests.

Three repositories with a classifier of the same name: the model (``models``), its FP16 conversion
(``fp16``) and the same model with one weight deliberately perturbed (``perturbed``); ``models`` also
serves a BYTES identity model. The trace holds sampled requests of both, a request the servers refuse
(wrong shape) and requests recorded without contents.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.integration.traffic.trace import record, write_records

from sonic.cli.main import main
from sonic.models.fp16 import convert_file
from sonic.models.testing import CLASSIFIER_CONFIG, classifier_model, string_identity_model

STRINGS_CONFIG = """backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 2 ] } ]
"""
SAMPLED_CLASSIFIER = 12
SAMPLED_STRINGS = 3
REFUSED = 1
WITHOUT_CONTENTS = 4


@dataclass(frozen=True)
class Repositories:
    models: Path
    fp16: Path
    perturbed: Path
    trace: Path


def _classifier(root: Path, **kwargs: Any) -> Path:
    classifier_model(root / "classifier" / "1" / "model.onnx", **kwargs)
    (root / "classifier" / "config.pbtxt").write_text(CLASSIFIER_CONFIG.format(features=32, classes=5))
    return root


def _trace(directory: Path) -> Path:
    rng = np.random.default_rng(3)
    records = []
    for index in range(SAMPLED_CLASSIFIER + WITHOUT_CONTENTS):
        batch = 1 + index % 4
        inputs = {"INPUT0": ("FP32", rng.standard_normal((batch, 32)).astype(np.float32))}
        sampled = index < SAMPLED_CLASSIFIER
        records.append(
            record(index * 5.0, "classifier", inputs, request_id=f"c{index}", keep_contents=sampled)
        )
    wrong = {"INPUT0": ("FP32", np.zeros((1, 31), np.float32))}
    records.append(record(100.0, "classifier", wrong, request_id="wrong-shape", status="INVALID_ARGUMENT"))
    for index in range(SAMPLED_STRINGS):
        text = np.array([[f"event {index}".encode(), "h\u00e9llo \u2603".encode()]], dtype=np.object_)
        records.append(
            record(2.5 + index * 10.0, "strings", {"INPUT0": ("BYTES", text)}, request_id=f"s{index}")
        )
    write_records(directory, sorted(records, key=lambda r: r["arrival_unix_ns"]))
    return directory


@pytest.fixture(scope="session")
def repositories(tmp_path_factory: pytest.TempPathFactory) -> Repositories:
    root = tmp_path_factory.mktemp("validate")
    models = _classifier(root / "models")
    string_identity_model(models / "strings" / "1" / "model.onnx")
    (models / "strings" / "config.pbtxt").write_text(STRINGS_CONFIG)
    fp16 = _classifier(root / "fp16")
    convert_file(models / "classifier" / "1" / "model.onnx", fp16 / "classifier" / "1" / "model.onnx")
    perturbed = _classifier(root / "perturbed", perturbation=0.05)
    return Repositories(models, fp16, perturbed, _trace(root / "trace"))


@dataclass(frozen=True)
class Validation:
    code: int
    stdout: str
    stderr: str
    report: dict[str, Any]
    out: Path


def run_validate(out: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Validation:
    """``sonic validate ARGS --out OUT`` in this process: exit status, what it printed, its JSON."""
    code = main(["--log-level", "WARNING", "validate", *args, "--out", str(out)])
    captured = capsys.readouterr()
    path = out / "report.json"
    report = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return Validation(code, captured.out, captured.err, report, out)
