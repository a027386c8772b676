"""Reference models from the seed studies: PyTorch definitions with seeded random weights.

Each module defines one :class:`~sonic.models.zoo.base.ReferenceModel`; ``REGISTRY`` lists them.
Nothing is downloaded: weights are random, seeded, so every build gives the same model.
"""

from __future__ import annotations

from sonic.models.zoo.base import ReferenceModel
from sonic.models.zoo.emtrk import EMTRK_MICHEL


def registry() -> dict[str, ReferenceModel]:
    return {model.name: model for model in (EMTRK_MICHEL,)}


__all__ = ["ReferenceModel", "registry"]
