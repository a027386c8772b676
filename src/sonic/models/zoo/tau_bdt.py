"""``tau_bdt``: an XGBoost tau-versus-jet classifier trained on generated data, for the ``trees`` backend.

Input ``input__0`` FP32 [N, 8] (the name and layout of Triton's FIL backend): tau pT (GeV), |eta|,
decay mode (0, 1, 10, 11), charged isolation (GeV), neutral isolation (GeV), leading-track pT
fraction, flight-distance significance, number of signal photons. Output ``output__0`` FP32 [N, 2]:
probabilities of (jet, tau), as FIL gives with ``predict_proba``.

Training data: 20,000 generated candidates whose label follows a logistic function of the
features plus noise (seeded, so every build trains the same model). 60 boosting rounds of
depth-4 trees, trained single-threaded with the exact method so the trees do not depend on the
machine. The model is written as XGBoost JSON, ``<repo>/tau_bdt/1/model.json``; its "parameter
count" is the number of tree nodes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.models.zoo.base import Inputs, ReferenceModel

FEATURES = 8
TRAINING_SAMPLES = 20_000
ROUNDS = 60
PARAMS: dict[str, Any] = {
    "objective": "binary:logistic",
    "max_depth": 4,
    "eta": 0.2,
    "tree_method": "exact",
    "nthread": 1,
    "seed": 4,
}


def _features(batch: int, rng: np.random.Generator) -> npt.NDArray[np.float32]:
    x = np.empty((batch, FEATURES), dtype=np.float32)
    x[:, 0] = 20.0 + rng.exponential(30.0, batch)
    x[:, 1] = rng.uniform(0.0, 2.3, batch)
    x[:, 2] = rng.choice([0, 1, 10, 11], size=batch, p=[0.3, 0.4, 0.2, 0.1])
    x[:, 3] = rng.exponential(3.0, batch)
    x[:, 4] = rng.exponential(2.0, batch)
    x[:, 5] = rng.uniform(0.2, 1.0, batch)
    x[:, 6] = rng.exponential(1.5, batch)
    x[:, 7] = rng.poisson(1.0, batch)
    return x


def training_data() -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """The generated training set: features and 0/1 labels (1 = tau)."""
    rng = np.random.default_rng(2023)
    x = _features(TRAINING_SAMPLES, rng)
    score = 2.0 - 0.6 * x[:, 3] - 0.3 * x[:, 4] + 2.5 * (x[:, 5] - 0.6) + 0.4 * x[:, 6] - 0.2 * x[:, 7]
    score += rng.logistic(0.0, 1.0, TRAINING_SAMPLES)
    return x, (score > 0).astype(np.float32)


def _import_xgboost() -> Any:
    try:
        import xgboost  # noqa: PLC0415  (optional: only this model needs it)
    except ImportError:
        message = "building the tau_bdt reference model needs XGBoost: pip install 'sonic-inference[trees]'"
        raise ImportError(message) from None
    return xgboost


def train() -> Any:
    """Train the booster (an ``xgboost.Booster``) on :func:`training_data`."""
    xgboost = _import_xgboost()
    x, y = training_data()
    return xgboost.train(PARAMS, xgboost.DMatrix(x, label=y), num_boost_round=ROUNDS)


def write_artifact(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    train().save_model(str(path))


def node_count(path: Path) -> int:
    """Tree nodes in a saved XGBoost JSON model."""
    trees = json.loads(path.read_text())["learner"]["gradient_booster"]["model"]["trees"]
    return sum(int(tree["tree_param"]["num_nodes"]) for tree in trees)


def make_inputs(batch: int, rng: np.random.Generator) -> Inputs:
    return {"input__0": _features(batch, rng)}


CONFIG = """
name: "tau_bdt"
backend: "trees"
max_batch_size: 65536
default_model_filename: "model.json"
input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 8 ] } ]
output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
parameters [
  { key: "model_type" value: { string_value: "xgboost_json" } },
  { key: "output_class" value: { string_value: "true" } },
  { key: "predict_proba" value: { string_value: "true" } }
]
dynamic_batching {
  max_queue_delay_microseconds: 100
}
"""

TAU_BDT = ReferenceModel(
    name="tau_bdt",
    description="XGBoost tau-vs-jet BDT (trees backend), 8 features",
    make_inputs=make_inputs,
    input_names=("input__0",),
    output_names=("output__0",),
    config_text=CONFIG,
    parameter_count=1_624,  # tree nodes
    seed_batch_size=3,
    write_artifact=write_artifact,
    filename="model.json",
)
