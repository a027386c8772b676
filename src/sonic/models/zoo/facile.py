"""FACILE: CMS HCAL per-channel energy regression (seed 000), a dense network of 2,109 parameters.

One row per HCAL channel ("rechit"); an event sends all ~16,000 channels in one request, which is
why the seed study ran it at batch 16000. Input ``rechit_features``: FP32 [N, 14]:

====  ==========================================================================================
0-7   charge in time samples TS0..TS7 (fC, pedestal subtracted), the digis MAHI fits
8     pedestal (fC) of the channel
9     gain (GeV/fC) from conditions
10    ieta (-29..29, signed)
11    iphi (1..72)
12    depth (1..7)
13    subdetector flag: 0 = HB, 1 = HE
====  ==========================================================================================

Network: batch normalisation of the inputs, dense 32 + ReLU, dense 32 + ReLU, dense 16 + ReLU,
dense 1 (linear): output ``energy`` FP32 [N, 1], the channel energy in GeV. The published FACILE
is a dense network of about 2k parameters trained to reproduce MAHI; the layer widths here are
chosen to match that size (weights are seeded random, nothing is trained).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sonic.models.zoo.base import Inputs, ReferenceModel

if TYPE_CHECKING:
    import torch

FEATURES = 14


def make_module() -> torch.nn.Module:
    import torch  # noqa: PLC0415  (torch is an optional extra)
    from torch import nn  # noqa: PLC0415

    torch.manual_seed(2007)
    return nn.Sequential(
        nn.BatchNorm1d(FEATURES),
        nn.Linear(FEATURES, 32),
        nn.ReLU(),
        nn.Linear(32, 32),
        nn.ReLU(),
        nn.Linear(32, 16),
        nn.ReLU(),
        nn.Linear(16, 1),
    ).eval()


def make_inputs(batch: int, rng: np.random.Generator) -> Inputs:
    x = np.empty((batch, FEATURES), dtype=np.float32)
    # A pulse peaking in TS3-TS4 with noise, as a rough stand-in for real digis.
    amplitude = rng.exponential(20.0, size=(batch, 1))
    shape = np.array([0.0, 0.02, 0.1, 0.45, 0.3, 0.1, 0.02, 0.01])
    x[:, 0:8] = amplitude * shape + rng.normal(0.0, 0.5, size=(batch, 8))
    x[:, 8] = rng.normal(3.0, 0.3, size=batch)
    x[:, 9] = rng.uniform(0.1, 0.3, size=batch)
    ieta = rng.integers(1, 30, size=batch) * rng.choice([-1, 1], size=batch)
    x[:, 10] = ieta
    x[:, 11] = rng.integers(1, 73, size=batch)
    x[:, 12] = rng.integers(1, 8, size=batch)
    x[:, 13] = np.abs(ieta) > 16
    return {"rechit_features": x}


CONFIG = """
name: "facile"
backend: "onnxruntime"
max_batch_size: 65536
input [ { name: "rechit_features" data_type: TYPE_FP32 dims: [ 14 ] } ]
output [ { name: "energy" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching {
  preferred_batch_size: [ 16000, 32000, 64000 ]
  max_queue_delay_microseconds: 100
}
"""

FACILE = ReferenceModel(
    name="facile",
    description="CMS HCAL FACILE energy regression, 14 features per channel",
    make_inputs=make_inputs,
    input_names=("rechit_features",),
    output_names=("energy",),
    config_text=CONFIG,
    parameter_count=2_109,
    seed_batch_size=16000,
    make_module=make_module,
)
