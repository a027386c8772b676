"""ParticleNet jet taggers of the MiniAOD demonstrator (seed 001): ``particlenet_ak4``, ``particlenet_ak8``.

A dynamic-graph CNN over the jet's particles (Qu & Gouskos, arXiv:1902.08570), with the layout of
the CMS ONNX models (channels first, padded to a fixed multiplicity, with a mask):

- ``pf_points`` FP32 [N, 2, P]: (delta-eta, delta-phi) of each particle to the jet axis, used for
  the first k-nearest-neighbour graph;
- ``pf_features`` FP32 [N, F, P]: per-particle features (log pT, log E, charge, PID flags,
  impact parameters, ...);
- ``pf_mask`` FP32 [N, 1, P]: 1 for a real particle, 0 for padding. Jets have a variable number
  of particles; padded slots must be 0 in the mask (their points and features are ignored).

AK4: P = 50, F = 20, 8 classes (b, bb, c, cc, uds, g, undefined, pile-up); AK8: P = 100, F = 25,
10 classes. Output ``softmax`` FP32 [N, classes].

Network (the published full ParticleNet): input batch norm; three EdgeConv blocks with k = 16
neighbours and widths (64, 64, 64), (128, 128, 128), (256, 256, 256), the first on ``pf_points``
and the others on the previous block's features, each with a 1x1 shortcut; masked mean over
particles; dense 256 + ReLU; dense to classes (no fusion layer: that came later in CMS's versions
and would add 172k parameters).
Parameters: 370,224 (AK4) and 371,708 (AK8), near the published 366k. The neighbour search
(``topk`` on pairwise distances, ``GatherElements``) is part of the ONNX graph; padded particles
are shifted 1e9 away so they are never neighbours of real ones, as in the reference code. The last
layer is standardised on a fixed calibration batch so the random network's scores depend visibly
on its input.

Seed batch sizes: ~8 AK4 jets and ~1 AK8 jet per event (from the input sizes per event in the seed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from sonic.models.zoo.base import Inputs, ReferenceModel, standardise_logits

if TYPE_CHECKING:
    import torch

NEIGHBOURS = 16
EDGE_BLOCKS = ((64, 64, 64), (128, 128, 128), (256, 256, 256))


def _particlenet(count: int, features: int, classes: int, seed: int) -> torch.nn.Module:
    import torch  # noqa: PLC0415  (torch is an optional extra)
    from torch import nn  # noqa: PLC0415

    def knn(points: torch.Tensor, k: int) -> torch.Tensor:
        """Indices [N, P, k] of each particle's k nearest neighbours (itself excluded)."""
        inner = -2 * torch.matmul(points.transpose(2, 1), points)
        square = torch.sum(points**2, dim=1, keepdim=True)
        negative_distance = -square - inner - square.transpose(2, 1)
        return negative_distance.topk(k=k + 1, dim=-1)[1][:, :, 1:]

    def neighbour_features(fts: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """[N, 2C, P, k]: each particle's features and its neighbours' differences to them."""
        # Batch kept as -1 or read from the tensor so the exported graph has a dynamic batch.
        channels, particles, k = fts.shape[1], fts.shape[2], idx.shape[2]
        flat = idx.reshape(idx.shape[0], 1, particles * k).expand(-1, channels, -1)
        neighbours = torch.gather(fts, 2, flat).reshape(-1, channels, particles, k)
        centre = fts.unsqueeze(3).expand(-1, -1, -1, k)
        return torch.cat([centre, neighbours - centre], dim=1)

    class EdgeConv(nn.Module):
        def __init__(self, cin: int, widths: tuple[int, ...]) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            previous = 2 * cin
            for width in widths:
                layers += [nn.Conv2d(previous, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
                previous = width
            self.edge = nn.Sequential(*layers)
            self.shortcut = nn.Sequential(
                nn.Conv1d(cin, widths[-1], 1, bias=False), nn.BatchNorm1d(widths[-1])
            )

        def forward(self, points: torch.Tensor, fts: torch.Tensor) -> torch.Tensor:
            idx = knn(points, NEIGHBOURS)
            x = self.edge(neighbour_features(fts, idx)).mean(dim=-1)
            return torch.relu(x + self.shortcut(fts))

    class ParticleNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_norm = nn.BatchNorm1d(features)
            blocks = []
            cin = features
            for widths in EDGE_BLOCKS:
                blocks.append(EdgeConv(cin, widths))
                cin = widths[-1]
            self.blocks = nn.ModuleList(blocks)
            self.hidden = nn.Sequential(nn.Linear(cin, 256), nn.ReLU(), nn.Dropout(0.1))
            self.output = nn.Linear(256, classes)

        def forward(self, points: torch.Tensor, fts: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.output(self.hidden(self.pooled(points, fts, mask))), dim=1)

        def pooled(self, points: torch.Tensor, fts: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            shift = (mask == 0).to(points.dtype) * 1e9
            x: torch.Tensor = self.input_norm(fts) * mask
            for index, block in enumerate(self.blocks):
                x = block((points if index == 0 else x) + shift, x) * mask
            return x.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)

    torch.manual_seed(seed)
    model = ParticleNet().eval()
    calibration = _make_inputs(count, features)(16, np.random.default_rng(seed))
    with torch.no_grad():
        arrays = (torch.from_numpy(calibration[name]) for name in ("pf_points", "pf_features", "pf_mask"))
        hidden = model.hidden(model.pooled(*arrays))
    standardise_logits(model.output, hidden)
    return model


def _make_inputs(count: int, features: int) -> Callable[[int, np.random.Generator], Inputs]:
    def make_inputs(batch: int, rng: np.random.Generator) -> Inputs:
        multiplicity = rng.integers(count // 5, count + 1, size=batch)
        mask = (np.arange(count)[None, :] < multiplicity[:, None]).astype(np.float32)[:, None, :]
        points = rng.normal(0.0, 0.2, size=(batch, 2, count)).astype(np.float32) * mask
        fts = rng.normal(0.0, 1.0, size=(batch, features, count)).astype(np.float32) * mask
        return {"pf_points": points, "pf_features": fts, "pf_mask": mask}

    return make_inputs


def _config(name: str, count: int, features: int, classes: int, preferred: tuple[int, ...]) -> str:
    sizes = ", ".join(str(s) for s in preferred)
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 256
input [
  {{ name: "pf_points" data_type: TYPE_FP32 dims: [ 2, {count} ] }},
  {{ name: "pf_features" data_type: TYPE_FP32 dims: [ {features}, {count} ] }},
  {{ name: "pf_mask" data_type: TYPE_FP32 dims: [ 1, {count} ] }}
]
output [ {{ name: "softmax" data_type: TYPE_FP32 dims: [ {classes} ] }} ]
dynamic_batching {{
  preferred_batch_size: [ {sizes} ]
  max_queue_delay_microseconds: 200
}}
"""


def _reference(
    name: str, count: int, features: int, classes: int, parameters: int, batch: int, seed: int
) -> ReferenceModel:
    def make_module() -> torch.nn.Module:
        return _particlenet(count, features, classes, seed)

    return ReferenceModel(
        name=name,
        description=f"ParticleNet {name[-3:].upper()} tagger, {count} particles x {features} features",
        make_inputs=_make_inputs(count, features),
        input_names=("pf_points", "pf_features", "pf_mask"),
        output_names=("softmax",),
        config_text=_config(name, count, features, classes, (batch * 4, batch * 8)),
        parameter_count=parameters,
        seed_batch_size=batch,
        make_module=make_module,
    )


PARTICLENET_AK4 = _reference("particlenet_ak4", 50, 20, 8, 370_224, batch=8, seed=4)
PARTICLENET_AK8 = _reference("particlenet_ak8", 100, 25, 10, 371_708, batch=1, seed=8)
