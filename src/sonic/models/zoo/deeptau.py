"""DeepTau: tau identification CNN over inner and outer grids plus high-level features (seed 001).

One request per event holding its tau candidates (~3 per event, from the 1.18 MB per event of the
seed). Inputs (channels last, as the TensorFlow original):

- ``tau_features`` FP32 [N, 47]: high-level tau features (pT, eta, decay mode, isolation sums, ...);
- ``inner_cells`` FP32 [N, 11, 11, 188]: 0.02 x 0.02 (eta, phi) cells around the tau axis;
- ``outer_cells`` FP32 [N, 21, 21, 188]: 0.05 x 0.05 cells.

The 188 features per cell are the e/gamma (86), muon (64) and hadron (38) blocks of DeepTau v2,
concatenated; empty cells are all zero.

Network: per cell (1x1 convolutions, shared by position) 188 -> 128 -> 96 with ReLU, separately
for each grid; then 3x3 convolutions without padding, 96 channels + ReLU, until the grid is 1x1
(5 for the inner grid, 10 for the outer); the high-level features through dense 128 -> 96 + ReLU;
the three 96-vectors concatenated -> dense 200 -> 200 -> 200 (ReLU) -> 4, softmax. Output
``tau_scores`` FP32 [N, 4]: (e, mu, tau, jet). The last layer is standardised on a fixed
calibration batch so that the random network's scores depend visibly on its input. 1,476,284 parameters (DeepTau v2 has ~1.4M).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from sonic.models.zoo.base import Inputs, ReferenceModel, standardise_logits

if TYPE_CHECKING:
    import torch

HIGH_LEVEL = 47
CELL_FEATURES = 188
INNER, OUTER = 11, 21
WIDTH = 96
INPUTS = ("tau_features", "inner_cells", "outer_cells")


def make_module() -> torch.nn.Module:
    import torch  # noqa: PLC0415  (torch is an optional extra)
    from torch import nn  # noqa: PLC0415

    def grid_branch(size: int) -> nn.Sequential:
        layers: list[nn.Module] = [
            nn.Conv2d(CELL_FEATURES, 128, 1),
            nn.ReLU(),
            nn.Conv2d(128, WIDTH, 1),
            nn.ReLU(),
        ]
        for _ in range((size - 1) // 2):
            layers += [nn.Conv2d(WIDTH, WIDTH, 3), nn.ReLU()]
        return nn.Sequential(*layers, nn.Flatten())

    class DeepTau(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = grid_branch(INNER)
            self.outer = grid_branch(OUTER)
            self.high_level = nn.Sequential(
                nn.Linear(HIGH_LEVEL, 128), nn.ReLU(), nn.Linear(128, WIDTH), nn.ReLU()
            )
            self.head = nn.Sequential(
                nn.Linear(3 * WIDTH, 200),
                nn.ReLU(),
                nn.Linear(200, 200),
                nn.ReLU(),
                nn.Linear(200, 200),
                nn.ReLU(),
            )
            self.output = nn.Linear(200, 4)

        def forward(self, tau: torch.Tensor, inner: torch.Tensor, outer: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.output(self.head(self.merged(tau, inner, outer))), dim=1)

        def merged(self, tau: torch.Tensor, inner: torch.Tensor, outer: torch.Tensor) -> torch.Tensor:
            return torch.cat(
                [
                    self.high_level(tau),
                    self.inner(inner.permute(0, 3, 1, 2)),
                    self.outer(outer.permute(0, 3, 1, 2)),
                ],
                dim=1,
            )

    torch.manual_seed(2022)
    model = DeepTau().eval()
    calibration = make_inputs(16, np.random.default_rng(2022))
    with torch.no_grad():
        hidden = model.head(model.merged(*(torch.from_numpy(calibration[k]) for k in INPUTS)))
    standardise_logits(model.output, hidden)
    return model


def make_inputs(batch: int, rng: np.random.Generator) -> Inputs:
    def grid(size: int, occupancy: float) -> npt.NDArray[np.float32]:
        cells = rng.normal(0.0, 1.0, size=(batch, size, size, CELL_FEATURES)).astype(np.float32)
        empty = rng.random((batch, size, size, 1)) > occupancy
        return np.where(empty, np.float32(0.0), cells)

    return {
        "tau_features": rng.normal(0.0, 1.0, size=(batch, HIGH_LEVEL)).astype(np.float32),
        "inner_cells": grid(INNER, 0.3),
        "outer_cells": grid(OUTER, 0.15),
    }


CONFIG = """
name: "deeptau"
backend: "onnxruntime"
max_batch_size: 128
input [
  { name: "tau_features" data_type: TYPE_FP32 dims: [ 47 ] },
  { name: "inner_cells" data_type: TYPE_FP32 dims: [ 11, 11, 188 ] },
  { name: "outer_cells" data_type: TYPE_FP32 dims: [ 21, 21, 188 ] }
]
output [ { name: "tau_scores" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching {
  preferred_batch_size: [ 12, 24 ]
  max_queue_delay_microseconds: 200
}
"""

DEEPTAU = ReferenceModel(
    name="deeptau",
    description="DeepTau CNN over 11x11 and 21x21 cell grids plus 47 tau features",
    make_inputs=make_inputs,
    input_names=INPUTS,
    output_names=("tau_scores",),
    config_text=CONFIG,
    parameter_count=1_476_284,
    seed_batch_size=3,
    make_module=make_module,
)
