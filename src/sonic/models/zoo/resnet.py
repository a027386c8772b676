"""ResNet top-quark taggers on jet images (seed 000): ``resnet50`` and the reduced ``resnet_top``.

Input ``jet_images`` FP32 [N, 224, 224, 3] (channels last): jet constituents pixelated in a
224 x 224 (eta, phi) window, one channel each for charged-hadron pT, neutral-hadron pT and
electromagnetic pT, as in the FPGA/GPU-as-a-service top-tagging studies that fed ImageNet
networks. Output ``top_probs`` FP32 [N, 2]: softmax over (QCD, top).

``resnet50``: the standard ResNet-50 (bottleneck blocks 3-4-6-3, widths 64-128-256-512, expansion 4)
written out here because torchvision is not available on CPU-only installs, with a 2-class head:
23,512,130 parameters. ``resnet_top``: the same depth with the last two stages narrowed
(bottleneck widths 192 and 256 instead of 256 and 512; 1024 channels out), 9,641,026 parameters,
matching the ~10M tagger of the seed study. Both ran at batch 10 there. BatchNorm is folded into the convolutions at export.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sonic.models.zoo.base import Inputs, ReferenceModel, standardise_logits

if TYPE_CHECKING:
    import torch

SIZE = 224


def _resnet(blocks: tuple[int, ...], widths: tuple[int, ...], seed: int) -> torch.nn.Module:
    import torch  # noqa: PLC0415  (torch is an optional extra)
    from torch import nn  # noqa: PLC0415

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(),
                nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(),
                nn.Conv2d(width, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            )
            self.shortcut: nn.Module = nn.Identity()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.body(x) + self.shortcut(x))

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[nn.Module] = [
                nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
                nn.BatchNorm2d(64),
                nn.ReLU(),
                nn.MaxPool2d(3, stride=2, padding=1),
            ]
            cin = 64
            for stage, (count, width) in enumerate(zip(blocks, widths, strict=True)):
                for index in range(count):
                    stride = 2 if stage > 0 and index == 0 else 1
                    layers.append(Bottleneck(cin, width, stride))
                    cin = width * 4
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Linear(cin, 2)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            x = self.features(images.permute(0, 3, 1, 2))
            return torch.softmax(self.classifier(x.mean(dim=(2, 3))), dim=1)

    torch.manual_seed(seed)
    model = ResNet()
    # A deep network with random weights and default BatchNorm statistics maps every image to
    # nearly the same pooled features, leaving the softmax flat at 0.5 and output comparisons
    # meaningless. So BatchNorm statistics are set from a fixed calibration batch (one pass in
    # training mode with a cumulative average), and the head's logits standardised on it.
    images = torch.from_numpy(make_inputs(4, np.random.default_rng(seed))["jet_images"])
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.momentum = None
    with torch.no_grad():
        model.train()
        model.features(images.permute(0, 3, 1, 2))
        model.eval()
        pooled = model.features(images.permute(0, 3, 1, 2)).mean(dim=(2, 3))
    standardise_logits(model.classifier, pooled)
    return model


def make_resnet50() -> torch.nn.Module:
    return _resnet((3, 4, 6, 3), (64, 128, 256, 512), seed=50)


def make_resnet_top() -> torch.nn.Module:
    return _resnet((3, 4, 6, 3), (64, 128, 192, 256), seed=10)


def make_inputs(batch: int, rng: np.random.Generator) -> Inputs:
    # Sparse images: a few hundred lit pixels per jet, pT-like (exponential) intensities.
    images = np.zeros((batch, SIZE, SIZE, 3), dtype=np.float32)
    for index in range(batch):
        count = int(rng.integers(100, 400))
        eta = np.clip(rng.normal(SIZE / 2, 25, count), 0, SIZE - 1).astype(int)
        phi = np.clip(rng.normal(SIZE / 2, 25, count), 0, SIZE - 1).astype(int)
        channel = rng.integers(0, 3, count)
        images[index, eta, phi, channel] = rng.exponential(5.0, count)
    return {"jet_images": images}


def _config(name: str) -> str:
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 128
input [ {{ name: "jet_images" data_type: TYPE_FP32 dims: [ 224, 224, 3 ] }} ]
output [ {{ name: "top_probs" data_type: TYPE_FP32 dims: [ 2 ] }} ]
dynamic_batching {{
  preferred_batch_size: [ 20, 40 ]
  max_queue_delay_microseconds: 500
}}
"""


RESNET50 = ReferenceModel(
    name="resnet50",
    description="ResNet-50 top tagger, 224x224x3 jet images",
    make_inputs=make_inputs,
    input_names=("jet_images",),
    output_names=("top_probs",),
    config_text=_config("resnet50"),
    parameter_count=23_512_130,
    seed_batch_size=10,
    make_module=make_resnet50,
)

RESNET_TOP = ReferenceModel(
    name="resnet_top",
    description="reduced ResNet top tagger (~10M), 224x224x3 jet images",
    make_inputs=make_inputs,
    input_names=("jet_images",),
    output_names=("top_probs",),
    config_text=_config("resnet_top"),
    parameter_count=9_641_026,
    seed_batch_size=10,
    make_module=make_resnet_top,
)
