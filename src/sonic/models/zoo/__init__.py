"""Reference models from the seed studies: PyTorch definitions with seeded random weights, and one BDT.

Each module defines one or more :class:`~sonic.models.zoo.base.ReferenceModel`; :func:`registry`
lists them. Nothing is downloaded: weights are random, seeded, so every build gives the same model.

- seed 000 (HLT): :mod:`.facile`, :mod:`.deepcalo`, :mod:`.resnet`;
- seed 001 (MiniAOD): :mod:`.deepmet`, :mod:`.deeptau`, :mod:`.particlenet`, :mod:`.tau_bdt` (for ``trees``);
- seed 002 (ProtoDUNE): :mod:`.emtrk`.
"""

from __future__ import annotations

from sonic.models.zoo.base import ReferenceModel
from sonic.models.zoo.deepcalo import DEEPCALO
from sonic.models.zoo.deepmet import DEEPMET
from sonic.models.zoo.deeptau import DEEPTAU
from sonic.models.zoo.emtrk import EMTRK_MICHEL
from sonic.models.zoo.facile import FACILE
from sonic.models.zoo.particlenet import PARTICLENET_AK4, PARTICLENET_AK8
from sonic.models.zoo.resnet import RESNET50, RESNET_TOP
from sonic.models.zoo.tau_bdt import TAU_BDT


def registry() -> dict[str, ReferenceModel]:
    models = (
        EMTRK_MICHEL,
        FACILE,
        DEEPCALO,
        RESNET50,
        RESNET_TOP,
        PARTICLENET_AK4,
        PARTICLENET_AK8,
        DEEPMET,
        DEEPTAU,
        TAU_BDT,
    )
    return {model.name: model for model in models}


__all__ = ["ReferenceModel", "registry"]
