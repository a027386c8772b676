"""TorchScript variants of the reference models, for serving with a ``pytorch`` backend.

``torchscript_variant(model)`` is the same network traced with ``torch.jit.trace`` and saved as
``<name>_torchscript/1/model.pt``, with a config for ``backend: "pytorch"``. Tensors follow the
naming convention of Triton's PyTorch backend, which binds by position: ``INPUT__0``, ``INPUT__1``,
... in ``forward``'s argument order, and ``OUTPUT__0``, ... in the order ``forward`` returns them.
Dims, batching and the rest of the config are those of the ONNX model.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from google.protobuf import text_format

from sonic.models.zoo import ReferenceModel
from sonic.models.zoo.base import Inputs
from sonic.protocol.model_config import parse_config_text

if TYPE_CHECKING:
    import torch

SUFFIX = "_torchscript"


def export_torchscript(model: ReferenceModel, path: Path, module: torch.nn.Module | None = None) -> None:
    """Trace ``module`` (default: a fresh ``model.make_module()``) on batch-2 inputs; save at ``path``."""
    if model.make_module is None:
        raise ValueError(
            f"reference model '{model.name}' is not a PyTorch model and has no TorchScript export"
        )
    try:
        import torch  # noqa: PLC0415  (torch is an optional extra)
    except ImportError:
        message = "building TorchScript models needs PyTorch: pip install 'sonic-inference[torch]'"
        raise ImportError(message) from None
    if module is None:
        module = model.make_module()
    example = model.make_inputs(2, np.random.default_rng(0))
    args = tuple(torch.from_numpy(example[name]) for name in model.input_names)
    with warnings.catch_warnings(), torch.inference_mode():
        # Tracing warns about Python values it records as constants; these networks have no
        # data-dependent control flow, and the tests check other batch sizes against eager mode.
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(module, args, check_trace=False)  # type: ignore[no-untyped-call]
    path.parent.mkdir(parents=True, exist_ok=True)
    traced.save(str(path))


def torchscript_variant(model: ReferenceModel) -> ReferenceModel:
    if model.make_module is None:
        raise ValueError(
            f"reference model '{model.name}' is not a PyTorch model and has no TorchScript variant"
        )
    input_names = tuple(f"INPUT__{i}" for i in range(len(model.input_names)))
    output_names = tuple(f"OUTPUT__{i}" for i in range(len(model.output_names)))
    config = parse_config_text(model.config_text, f"{model.name}/config.pbtxt")
    config.name = model.name + SUFFIX
    config.backend = "pytorch"
    config.platform = ""
    config.default_model_filename = "model.pt"
    for tensor, name in zip(config.input, input_names, strict=True):
        tensor.name = name
    for tensor, name in zip(config.output, output_names, strict=True):
        tensor.name = name
    renames = dict(zip(model.input_names, input_names, strict=True))
    make_inputs = model.make_inputs

    def renamed_inputs(batch: int, rng: np.random.Generator) -> Inputs:
        return {renames[name]: array for name, array in make_inputs(batch, rng).items()}

    original = model

    def write_artifact(path: Path) -> None:
        export_torchscript(original, path)

    return dataclasses.replace(
        model,
        name=model.name + SUFFIX,
        description=f"{model.description} (TorchScript)",
        make_inputs=renamed_inputs,
        input_names=input_names,
        output_names=output_names,
        config_text=text_format.MessageToString(config),
        make_module=None,
        write_artifact=write_artifact,
        filename="model.pt",
    )
