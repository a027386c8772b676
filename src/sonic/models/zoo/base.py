"""What a reference model provides: how to build its file, example inputs, and its Triton config.

Most reference models are PyTorch modules with seeded random weights, exported to ONNX
(``make_module``). Models from other frameworks (the XGBoost ``tau_bdt``) write their own file
instead (``write_artifact``). Exactly one of the two is set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import torch

Inputs = dict[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class ReferenceModel:
    name: str
    description: str
    make_inputs: Callable[[int, np.random.Generator], Inputs]  # batch size, generator -> named inputs
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    config_text: str  # config.pbtxt (name, backend, max_batch_size, tensors, batching)
    # Trainable parameters for networks; for tree ensembles, the number of tree nodes.
    parameter_count: int
    seed_batch_size: int  # the batch size the seed studies used (per request)
    make_module: Callable[[], torch.nn.Module] | None = None  # seeded: the same weights on every call
    write_artifact: Callable[[Path], None] | None = None  # writes the model file at the given path
    filename: str = "model.onnx"  # the file in the version folder
    recipe_version: int = 1  # bump to force rebuilds of existing repositories

    def __post_init__(self) -> None:
        if (self.make_module is None) == (self.write_artifact is None):
            raise ValueError(f"reference model '{self.name}': set exactly one of make_module, write_artifact")

    @property
    def is_onnx(self) -> bool:
        return self.make_module is not None


def standardise_logits(head: torch.nn.Linear, features: torch.Tensor) -> None:
    """Rescale a final linear layer so its logits on ``features`` have mean 0 and unit spread.

    Networks with random weights map different inputs to nearly the same logits, which leaves
    softmax outputs flat and comparisons between runtimes meaningless; after this the outputs
    depend visibly on the input. ``features`` are the head's inputs for a fixed calibration batch.
    """
    import torch  # noqa: PLC0415  (torch is an optional extra)

    with torch.no_grad():
        logits = head(features)
        scale = logits.std(dim=0).clamp(min=1e-12)
        head.bias.sub_(logits.mean(dim=0)).div_(scale)
        head.weight.div_(scale[:, None])
