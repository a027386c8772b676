"""A DeepMET-like TensorFlow model: the tensor names and shapes of CMS's DeepMET, and its network.

Inputs as CMS's ``tensorflow_graphdef`` DeepMET: ``input`` FP32 ``[N, 4500, 8]`` (particle features)
and three categorical inputs ``input_cat0..2`` FP32 ``[N, 4500, 1]`` (charge, pdg class, fromPV);
output ``output/BiasAdd`` FP32 ``[N, 2]`` (the MET x and y). Each particle gets a weight from its
features and its categories embedded in 8 dimensions, through dense 64 + tanh -> dense 32 + tanh ->
dense 1 + sigmoid (the per-particle network of :mod:`sonic.models.zoo.deepmet`, about 19 M
multiply-adds per event); the output is the weighted sum of the particles' (px, py) through a bias.
A smaller network (one hidden layer of 16) made the model ~12x cheaper than DeepMET for the same
198 KB of input, so a served-vs-direct comparison measured mostly the transport of the input.
Seeded weights; building needs TensorFlow (the ``tensorflow`` extra).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

PARTICLES = 4500
FEATURES = 8
CATEGORIES = (3, 8, 4)  # vocabulary of each categorical input
EMBEDDING = 8
HIDDEN = (64, 32)  # dense layers per particle, then one weight
SEED = 11

CONFIG = """
max_batch_size: 64
input [
  { name: "input" data_type: TYPE_FP32 dims: [ 4500, 8 ] },
  { name: "input_cat0" data_type: TYPE_FP32 dims: [ 4500, 1 ] },
  { name: "input_cat1" data_type: TYPE_FP32 dims: [ 4500, 1 ] },
  { name: "input_cat2" data_type: TYPE_FP32 dims: [ 4500, 1 ] }
]
output [ { name: "output/BiasAdd" data_type: TYPE_FP32 dims: [ 2 ] } ]
dynamic_batching { }
"""


def _weights(seed: int) -> dict[str, npt.NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    width = FEATURES + EMBEDDING * len(CATEGORIES)
    weights = {f"embedding{i}": rng.normal(size=(n, EMBEDDING)) for i, n in enumerate(CATEGORIES)}
    sizes = [width, *HIDDEN, 1]
    for layer, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        weights[f"w{layer}"] = rng.normal(size=(n_in, n_out)) / np.sqrt(n_in)
        weights[f"b{layer}"] = rng.normal(size=n_out) * 0.1
    weights["bias"] = np.array([0.5, -0.5])
    return {name: value.astype(np.float32) for name, value in weights.items()}


def _forward(tf: Any, inputs: dict[str, Any], weights: dict[str, npt.NDArray[np.float32]]) -> Any:
    embedded = [
        tf.gather(weights[f"embedding{i}"], tf.cast(tf.squeeze(inputs[f"input_cat{i}"], -1), tf.int32))
        for i in range(len(CATEGORIES))
    ]
    hidden = tf.concat([inputs["input"], *embedded], axis=-1)
    for layer in range(len(HIDDEN)):
        hidden = tf.tanh(tf.tensordot(hidden, weights[f"w{layer}"], axes=1) + weights[f"b{layer}"])
    last = len(HIDDEN)
    weight = tf.sigmoid(
        tf.tensordot(hidden, weights[f"w{last}"], axes=1) + weights[f"b{last}"]
    )  # [N, 4500, 1]
    met = tf.reduce_sum(weight * inputs["input"][:, :, :2], axis=1)  # weighted (px, py)
    with tf.name_scope("output"):
        return tf.nn.bias_add(met, weights["bias"], name="BiasAdd")


def example_inputs(batch: int, seed: int = 0) -> dict[str, npt.NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    inputs = {"input": rng.normal(size=(batch, PARTICLES, FEATURES)).astype(np.float32)}
    for i, n in enumerate(CATEGORIES):
        inputs[f"input_cat{i}"] = rng.integers(0, n, size=(batch, PARTICLES, 1)).astype(np.float32)
    return inputs


def build_graphdef(path: Path, seed: int = SEED) -> None:
    """A frozen GraphDef (weights as constants) at ``path``, as ``tensorflow_graphdef`` serves."""
    import tensorflow as tf  # noqa: PLC0415  (optional: the tensorflow extra)

    graph = tf.Graph()
    with graph.as_default():
        inputs = {
            "input": tf.compat.v1.placeholder(tf.float32, [None, PARTICLES, FEATURES], name="input"),
            **{
                f"input_cat{i}": tf.compat.v1.placeholder(
                    tf.float32, [None, PARTICLES, 1], name=f"input_cat{i}"
                )
                for i in range(len(CATEGORIES))
            },
        }
        _forward(tf, inputs, _weights(seed))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(graph.as_graph_def().SerializeToString())


def build_savedmodel(path: Path, seed: int = SEED) -> None:
    """A SavedModel folder at ``path`` whose ``serving_default`` signature has the same names."""
    import tensorflow as tf  # noqa: PLC0415  (optional: the tensorflow extra)

    weights = _weights(seed)
    specs = {"input": tf.TensorSpec([None, PARTICLES, FEATURES], tf.float32, name="input")}
    specs |= {
        f"input_cat{i}": tf.TensorSpec([None, PARTICLES, 1], tf.float32, name=f"input_cat{i}")
        for i in range(len(CATEGORIES))
    }

    class DeepMet(tf.Module):  # type: ignore[misc]
        @tf.function(input_signature=[specs])  # type: ignore[untyped-decorator]
        def serve(self, inputs: dict[str, Any]) -> dict[str, Any]:
            return {"output": _forward(tf, inputs, weights)}

    module = DeepMet()
    concrete = module.serve.get_concrete_function()
    signature = tf.function(lambda **kw: concrete(kw)).get_concrete_function(**specs)
    tf.saved_model.save(module, str(path), signatures={"serving_default": signature})


def write_repository(root: Path, *, versions: tuple[int, ...] = (1,), savedmodel: bool = False) -> None:
    """``root/deepmet`` (tensorflow_graphdef, one graph per version, seeds differ) and, with
    ``savedmodel``, ``root/deepmet_saved`` (tensorflow_savedmodel)."""
    for version in versions:
        build_graphdef(root / "deepmet" / str(version) / "model.graphdef", seed=SEED + version)
    policy = "version_policy { all { } }\n" if len(versions) > 1 else ""
    (root / "deepmet" / "config.pbtxt").write_text(f'platform: "tensorflow_graphdef"\n{policy}{CONFIG}')
    if savedmodel:
        build_savedmodel(root / "deepmet_saved" / "1" / "model.savedmodel", seed=SEED + 1)
        saved = CONFIG.replace('"output/BiasAdd"', '"output"')
        (root / "deepmet_saved" / "config.pbtxt").write_text(f'platform: "tensorflow_savedmodel"\n{saved}')
