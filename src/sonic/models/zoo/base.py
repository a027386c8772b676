"""What a reference model provides: a seeded PyTorch module, example inputs, and its Triton config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
    make_module: Callable[[], torch.nn.Module]  # seeded: the same weights on every call
    make_inputs: Callable[[int, np.random.Generator], Inputs]  # batch size, generator -> named inputs
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    config_text: str  # config.pbtxt (name, backend, max_batch_size, tensors, batching)
    parameter_count: int  # asserted by the tests
    seed_batch_size: int  # the batch size the seed studies used
    recipe_version: int = 1  # bump to force rebuilds of existing repositories
