"""DeepMET: per-particle weights summed into a missing-transverse-momentum vector (seed 001).

One request per event, with the event's PF candidates padded to 4,500 (the MiniAOD model's size):

- ``pf_continuous`` FP32 [N, 4500, 6]: pT (GeV), eta, phi, d0 (cm), dz (cm), PUPPI weight;
- ``pf_categorical`` INT64 [N, 4500, 3]: charge index (0: -1, 1: 0, 2: +1), particle class
  (0: padding, 1: e, 2: mu, 3: gamma, 4: charged hadron, 5: neutral hadron, 6: HF hadron,
  7: HF e/gamma), and fromPV (0..3).

Padded slots have pT = 0, so they add nothing to the sum whatever weight they get.

Network: one 8-dimensional embedding per categorical feature; batch norm of the continuous
features; per candidate dense 64 + tanh -> dense 32 + tanh -> dense 1 + sigmoid: the weight w_i.
Outputs ``weights`` FP32 [N, 4500] and ``met`` FP32 [N, 2] = -(sum w_i pT_i cos(phi_i),
sum w_i pT_i sin(phi_i)) (GeV). 4,229 parameters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sonic.models.zoo.base import Inputs, ReferenceModel

if TYPE_CHECKING:
    import torch

CANDIDATES = 4500
CONTINUOUS = 6
CATEGORIES = (3, 8, 4)  # charge, particle class, fromPV
EMBEDDING = 8


def make_module() -> torch.nn.Module:
    import torch  # noqa: PLC0415  (torch is an optional extra)
    from torch import nn  # noqa: PLC0415

    class DeepMET(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embeddings = nn.ModuleList(nn.Embedding(size, EMBEDDING) for size in CATEGORIES)
            self.norm = nn.BatchNorm1d(CONTINUOUS)
            self.dense = nn.Sequential(
                nn.Linear(CONTINUOUS + EMBEDDING * len(CATEGORIES), 64),
                nn.Tanh(),
                nn.Linear(64, 32),
                nn.Tanh(),
                nn.Linear(32, 1),
                nn.Sigmoid(),
            )

        def forward(self, continuous: torch.Tensor, categorical: torch.Tensor) -> tuple[torch.Tensor, ...]:
            normed = self.norm(continuous.transpose(1, 2)).transpose(1, 2)
            embedded = [emb(categorical[:, :, i]) for i, emb in enumerate(self.embeddings)]
            weights = self.dense(torch.cat([normed, *embedded], dim=2)).squeeze(2)
            pt, phi = continuous[:, :, 0], continuous[:, :, 2]
            met_x = -(weights * pt * torch.cos(phi)).sum(dim=1)
            met_y = -(weights * pt * torch.sin(phi)).sum(dim=1)
            return weights, torch.stack([met_x, met_y], dim=1)

    torch.manual_seed(2021)
    return DeepMET().eval()


def make_inputs(batch: int, rng: np.random.Generator) -> Inputs:
    continuous = np.zeros((batch, CANDIDATES, CONTINUOUS), dtype=np.float32)
    categorical = np.zeros((batch, CANDIDATES, len(CATEGORIES)), dtype=np.int64)
    for index, count in enumerate(rng.integers(1000, CANDIDATES + 1, size=batch)):
        continuous[index, :count, 0] = rng.exponential(2.0, count)
        continuous[index, :count, 1] = rng.uniform(-5.0, 5.0, count)
        continuous[index, :count, 2] = rng.uniform(-np.pi, np.pi, count)
        continuous[index, :count, 3:5] = rng.normal(0.0, 0.05, (count, 2))
        continuous[index, :count, 5] = rng.uniform(0.0, 1.0, count)
        categorical[index, :count, 0] = rng.integers(0, 3, count)
        categorical[index, :count, 1] = rng.integers(1, 8, count)
        categorical[index, :count, 2] = rng.integers(0, 4, count)
    return {"pf_continuous": continuous, "pf_categorical": categorical}


CONFIG = """
name: "deepmet"
backend: "onnxruntime"
max_batch_size: 64
input [
  { name: "pf_continuous" data_type: TYPE_FP32 dims: [ 4500, 6 ] },
  { name: "pf_categorical" data_type: TYPE_INT64 dims: [ 4500, 3 ] }
]
output [
  { name: "weights" data_type: TYPE_FP32 dims: [ 4500 ] },
  { name: "met" data_type: TYPE_FP32 dims: [ 2 ] }
]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 200
}
"""

DEEPMET = ReferenceModel(
    name="deepmet",
    description="DeepMET per-candidate weights and MET, 4500 candidates",
    make_inputs=make_inputs,
    input_names=("pf_continuous", "pf_categorical"),
    output_names=("weights", "met"),
    config_text=CONFIG,
    parameter_count=4_229,
    seed_batch_size=1,
    make_module=make_module,
)
