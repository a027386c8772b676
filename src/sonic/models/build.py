"""Export reference models to ONNX (or write their own file) as a Triton model repository.

Existing files are reused when their stamp (model name, recipe version, opset) matches, so tests,
benchmarks and demos build each model once.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sonic.models.torchscript import torchscript_variant
from sonic.models.zoo import ReferenceModel, registry

if TYPE_CHECKING:
    import torch

OPSET = 17
STAMP = ".sonic-build.json"


def _stamp(model: ReferenceModel) -> dict[str, object]:
    return {"name": model.name, "recipe_version": model.recipe_version, "opset": OPSET}


def is_up_to_date(model: ReferenceModel, model_dir: Path) -> bool:
    stamp = model_dir / STAMP
    if not (stamp.is_file() and (model_dir / "1" / model.filename).is_file()):
        return False
    try:
        return bool(json.loads(stamp.read_text()) == _stamp(model))
    except (OSError, ValueError):
        return False


def export_onnx(model: ReferenceModel, path: Path, module: torch.nn.Module | None = None) -> None:
    """Export ``module`` (default: a fresh ``model.make_module()``) to ONNX at ``path``."""
    if model.make_module is None:
        raise ValueError(f"reference model '{model.name}' is not a PyTorch model and has no ONNX export")
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        message = "building reference models needs PyTorch: pip install 'sonic-inference[torch]'"
        raise ImportError(message) from None
    if module is None:
        module = model.make_module()
    example = model.make_inputs(2, np.random.default_rng(0))
    args = tuple(torch.from_numpy(example[name]) for name in model.input_names)
    dynamic = {name: {0: "batch"} for name in (*model.input_names, *model.output_names)}
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # The TorchScript-based exporter is the one that handles these models on CPU-only torch;
        # it warns about its own deprecation, which is not the user's concern.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=list(model.input_names),
            output_names=list(model.output_names),
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,
        )


def _write_config(model: ReferenceModel, model_dir: Path) -> None:
    path = model_dir / "config.pbtxt"
    text = model.config_text.lstrip()
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def build_model(model: ReferenceModel, repository: Path, module: torch.nn.Module | None = None) -> Path:
    """Write ``model`` under ``repository`` unless up to date; ``module``: an already made module."""
    model_dir = repository / model.name
    if is_up_to_date(model, model_dir):
        _write_config(model, model_dir)  # cheap, so a changed config never needs a rebuild
        return model_dir
    target = model_dir / "1" / model.filename
    # Written beside the target and renamed, so an interrupted build never leaves a partial model.
    # The prefix keeps the extension, from which XGBoost picks the file format.
    tmp = target.with_name(f".tmp-{target.name}")
    if model.write_artifact is not None:
        tmp.parent.mkdir(parents=True, exist_ok=True)
        model.write_artifact(tmp)
    else:
        export_onnx(model, tmp, module)
    tmp.replace(target)
    _write_config(model, model_dir)
    (model_dir / STAMP).write_text(json.dumps(_stamp(model)))
    return model_dir


def build_repository(
    repository: Path, names: list[str] | None = None, *, torchscript: bool = False
) -> list[Path]:
    """Build the named models (default: all); with ``torchscript``, also their TorchScript variants."""
    models = registry()
    unknown = sorted(set(names or []) - set(models))
    if unknown:
        raise KeyError(f"unknown reference model(s) {unknown}; available: {sorted(models)}")
    selected = [models[name] for name in (names or sorted(models))]
    if torchscript:
        selected += [torchscript_variant(model) for model in selected if model.is_onnx]
    return [build_model(model, repository) for model in selected]
