"""DeepCalo: calorimeter-image CNN for electron/photon energy regression (seed 000), ~2M parameters.

Inputs (channels last, as the Keras original):

- ``calo_images`` FP32 [N, 56, 11, 4]: energy (GeV) in a 56 (eta) x 11 (phi) window around the
  cluster, one channel per EM calorimeter layer (presampler, strips, middle, back), resampled to
  the middle layer's granularity.
- ``scalars`` FP32 [N, 8]: cluster-level features (cluster energy, eta, phi, |eta| of the
  calorimeter frame, pile-up mu, track p, track-cluster delta-eta and delta-phi).

Network: conv 3x3 (32, 32) -> max-pool 2x1 -> conv 3x3 (64, 64) -> max-pool 2x1 -> conv 3x3
(128, 128) -> max-pool 2x1, all "same" padding with ReLU; flatten (7 x 11 x 128 = 9,856) -> dense
192 + ReLU, concatenated with the 8 scalars -> dense 192 + ReLU -> dense 64 + ReLU -> dense 1:
output ``energy`` FP32 [N, 1] (GeV). 2,230,849 parameters. The seed study ran it at batch 10.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sonic.models.zoo.base import Inputs, ReferenceModel

if TYPE_CHECKING:
    import torch

ETA, PHI, LAYERS, SCALARS = 56, 11, 4, 8


def make_module() -> torch.nn.Module:
    import torch  # noqa: PLC0415  (torch is an optional extra)
    from torch import nn  # noqa: PLC0415

    def block(cin: int, cout: int) -> list[nn.Module]:
        return [
            nn.Conv2d(cin, cout, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d((2, 1)),
        ]

    class DeepCalo(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(*block(LAYERS, 32), *block(32, 64), *block(64, 128))
            self.image_dense = nn.Linear(7 * PHI * 128, 192)
            self.head = nn.Sequential(
                nn.Linear(192 + SCALARS, 192),
                nn.ReLU(),
                nn.Linear(192, 64),
                nn.ReLU(),
                nn.Linear(64, 1),
            )

        def forward(self, images: torch.Tensor, scalars: torch.Tensor) -> torch.Tensor:
            x = self.features(images.permute(0, 3, 1, 2)).flatten(1)
            x = torch.relu(self.image_dense(x))
            energy: torch.Tensor = self.head(torch.cat([x, scalars], dim=1))
            return energy

    torch.manual_seed(2018)
    return DeepCalo().eval()


def make_inputs(batch: int, rng: np.random.Generator) -> Inputs:
    # A shower peaked at the window centre, spread most in the middle layer.
    eta = np.exp(-0.5 * ((np.arange(ETA) - ETA / 2) / 4.0) ** 2)
    phi = np.exp(-0.5 * ((np.arange(PHI) - PHI / 2) / 1.5) ** 2)
    profile = (eta[:, None] * phi[None, :])[None, :, :, None] * np.array([0.05, 0.25, 0.6, 0.1])
    energy = rng.exponential(40.0, size=(batch, 1, 1, 1)) + 5.0
    images = energy * profile + rng.normal(0.0, 0.05, size=(batch, ETA, PHI, LAYERS))
    scalars = rng.normal(0.0, 1.0, size=(batch, SCALARS))
    scalars[:, 0] = energy[:, 0, 0, 0]
    return {"calo_images": images.astype(np.float32), "scalars": scalars.astype(np.float32)}


CONFIG = """
name: "deepcalo"
backend: "onnxruntime"
max_batch_size: 256
input [
  { name: "calo_images" data_type: TYPE_FP32 dims: [ 56, 11, 4 ] },
  { name: "scalars" data_type: TYPE_FP32 dims: [ 8 ] }
]
output [ { name: "energy" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching {
  preferred_batch_size: [ 40, 80 ]
  max_queue_delay_microseconds: 200
}
"""

DEEPCALO = ReferenceModel(
    name="deepcalo",
    description="DeepCalo calorimeter-image energy regression",
    make_inputs=make_inputs,
    input_names=("calo_images", "scalars"),
    output_names=("energy",),
    config_text=CONFIG,
    parameter_count=2_230_849,
    seed_batch_size=10,
    make_module=make_module,
)
