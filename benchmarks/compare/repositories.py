"""One ONNX file per model and three repositories around it: sonic's, Triton's (Python backend running
the same onnxruntime session) and MLServer's (a custom runtime). The model code of the other two is in
``templates/``, copied as it is; what differs per model goes in a settings file beside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from benchmarks.compare.workloads import INTRA_OP_SPINNING, MODELS, THREADS, ZOO
from benchmarks.harness.processes import site_paths
from benchmarks.harness.report import RESULTS
from sonic.models.build import build_model
from sonic.models.zoo import registry
from sonic.testing.repository import MODELS as TEST_MODELS
from sonic.testing.repository import write_test_repository

RAW = RESULTS / "raw" / "compare"
TEMPLATES = Path(__file__).resolve().parent / "templates"


def _queue_delay_us(config_text: str) -> int:
    for line in config_text.splitlines():
        if "max_queue_delay_microseconds" in line:
            return int(line.split(":")[1])
    return 0


def one_cpu_instance(config_text: str) -> str:
    """The config with one CPU instance where it names none, for every server alike: without it Triton's
    Python backend runs one and sonic's onnxruntime two (Triton's onnxruntime default), and at 2 in flight
    on 2 cores sonic's two sessions of 2 intra-op threads each cost it ~30 % more CPU per FACILE b16000
    request (docs/benchmarks.md, issue 37: FACILE b16000)."""
    if "instance_group" in config_text:
        return config_text
    return config_text.rstrip() + "\ninstance_group [ { kind: KIND_CPU count: 1 } ]\n"


def triton_config(sonic_config: str) -> str:
    """The same config.pbtxt for Triton's Python backend, with one CPU instance."""
    return one_cpu_instance(sonic_config.replace('backend: "onnxruntime"', 'backend: "python"'))


def mlserver_settings(
    name: str, onnx_path: Path, config_text: str, max_batch_requests: int
) -> dict[str, Any]:
    """model-settings.json: adaptive batching of up to ``max_batch_requests`` requests, the config's delay."""
    delay_us = max(_queue_delay_us(config_text), 100)
    return {
        "name": name,
        "implementation": "compare_runtime.OnnxRuntimeModel",
        "parameters": {"uri": str(onnx_path), "extra": {"threads": THREADS, "spinning": INTRA_OP_SPINNING}},
        "max_batch_size": max_batch_requests,
        "max_batch_time": delay_us / 1e6,
    }


def write_triton_model(triton_repo: Path, name: str, sonic_repo: Path) -> None:
    """Triton's twin of sonic's ``name``: the same config on the Python backend, the template running the
    same ONNX file, and its settings beside it."""
    config = (sonic_repo / name / "config.pbtxt").read_text()
    version = triton_repo / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (triton_repo / name / "config.pbtxt").write_text(triton_config(config))
    shutil.copyfile(TEMPLATES / "triton_onnx_model.py", version / "model.py")
    onnx_path = sonic_repo / name / "1" / "model.onnx"
    settings = {
        "onnx": str(onnx_path),
        "threads": THREADS,
        "spinning": INTRA_OP_SPINNING,
        "paths": site_paths(),
    }
    (version / "compare_settings.json").write_text(json.dumps(settings, indent=2))


def build_repositories(root: Path = RAW) -> dict[str, Path]:
    """The three repositories under ``root`` (benchmarks/results/raw/compare), by server name."""
    sonic_repo, triton_repo, mlserver_repo = root / "sonic", root / "triton", root / "mlserver"
    models = registry()
    for name in ZOO:
        config_path = build_model(models[name], sonic_repo) / "config.pbtxt"
        config_path.write_text(one_cpu_instance(config_path.read_text()))
    write_test_repository(
        sonic_repo, "sonic", tuple(m for m in TEST_MODELS if m.name in {"identity", "identity_large"})
    )
    mlserver_repo.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(TEMPLATES / "compare_runtime.py", mlserver_repo / "compare_runtime.py")
    for name in MODELS:
        write_triton_model(triton_repo, name, sonic_repo)
        onnx_path = sonic_repo / name / "1" / "model.onnx"
        config = (sonic_repo / name / "config.pbtxt").read_text()
        (mlserver_repo / name).mkdir(parents=True, exist_ok=True)
        mlserver = mlserver_settings(name, onnx_path, config, max_batch_requests=32)
        (mlserver_repo / name / "model-settings.json").write_text(json.dumps(mlserver, indent=2))
    return {"sonic": sonic_repo, "triton": triton_repo, "mlserver": mlserver_repo}
