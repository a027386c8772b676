"""ProtoDUNE EmTrkMichelId CNN (seed 002), exactly as tabulated there.

Input ``main_input``: FP32 [N, 48, 48, 1] wire-plane patches (channels last, as in LArSoft's
Keras model). Conv2D 48 filters 5x5 stride 1 + ReLU -> dropout -> flatten (92,928) -> dense 128
+ ReLU -> dropout -> dense 32 + ReLU, then two heads: ``emtrk_none_out`` [3] softmax
(track / shower / none) and ``michel_out`` [1] sigmoid. 11,900,420 parameters. ProtoDUNE events
hold ~55k patches, sent in batches of 235 or 1693.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sonic.models.zoo.base import Inputs, ReferenceModel

if TYPE_CHECKING:
    import torch

PATCH = 48


def make_module() -> torch.nn.Module:
    import torch  # noqa: PLC0415  (torch is an optional extra)
    from torch import nn  # noqa: PLC0415

    class EmTrkMichelId(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 48, kernel_size=5)
            self.dense1 = nn.Linear(44 * 44 * 48, 128)
            self.dense2 = nn.Linear(128, 32)
            self.emtrk = nn.Linear(32, 3)
            self.michel = nn.Linear(32, 1)
            self.dropout = nn.Dropout(0.25)

        def forward(self, patches: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x = torch.relu(self.conv(patches.permute(0, 3, 1, 2)))
            x = self.dropout(x).flatten(1)
            x = self.dropout(torch.relu(self.dense1(x)))
            x = torch.relu(self.dense2(x))
            return torch.softmax(self.emtrk(x), dim=1), torch.sigmoid(self.michel(x))

    torch.manual_seed(2020)
    return EmTrkMichelId().eval()


def make_inputs(batch: int, rng: np.random.Generator) -> Inputs:
    return {"main_input": rng.random((batch, PATCH, PATCH, 1), dtype=np.float32)}


CONFIG = """
name: "emtrk_michel"
backend: "onnxruntime"
max_batch_size: 2048
input [ { name: "main_input" data_type: TYPE_FP32 dims: [ 48, 48, 1 ] } ]
output [
  { name: "emtrk_none_out" data_type: TYPE_FP32 dims: [ 3 ] },
  { name: "michel_out" data_type: TYPE_FP32 dims: [ 1 ] }
]
dynamic_batching {
  max_queue_delay_microseconds: 100
}
# Merged batches run in slices of 256 patches: onnxruntime needs ~0.75 MB of activations per patch,
# so a 1693-patch batch in one piece would hold ~1.25 GB (see docs/benchmarks.md, server core).
parameters { key: "max_execution_batch_size" value { string_value: "256" } }
"""

EMTRK_MICHEL = ReferenceModel(
    name="emtrk_michel",
    description="ProtoDUNE EmTrkMichelId CNN, 48x48 patches",
    make_inputs=make_inputs,
    input_names=("main_input",),
    output_names=("emtrk_none_out", "michel_out"),
    config_text=CONFIG,
    parameter_count=11_900_420,
    seed_batch_size=1693,
    make_module=make_module,
)
