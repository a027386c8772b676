"""A streaming pipeline laid out as ML4GW's ``hermes`` exports DeepClean and aframe: an ensemble
``streaming`` of three ONNX models, the first and last stateful (``sequence_batching`` with implicit
state, no control inputs, ``max_batch_size: 0``, as ``hermes.quiver.streaming`` writes them).

- ``snapshotter``: each request sends ``snapshot_update`` FP32 ``[1, C, U]``, the newest ``U`` samples of
  ``C`` channels; the model drops the oldest ``U`` samples of its state (``input_snapshot``, zeros at
  the sequence start), appends the update and answers the whole window ``[1, C, S]``
  (``network.witness_snapshot``, also kept as ``output_snapshot``).
- ``network``: a 1-D convolution over the window with seeded weights, then ``tanh``: ``[1, S]``.
- ``aggregator``: the online average of the overlapping predictions (each sample is covered by
  ``S / U`` windows): its state (``input_online_average``) holds the running sums aligned with the
  last window; it shifts them by ``U``, adds the new prediction and answers the ``U`` samples no later
  window covers, divided by ``S / U`` (``output_stream`` ``[1, U]``).

:class:`DirectStreaming` runs the same three files with onnxruntime, one state per sequence held by
the caller: what the served ensemble must answer. Built with ``onnx.helper``; used by tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from onnx import TensorProto, helper, numpy_helper

from sonic.models.simple import save_graph

SNAPSHOTTER, NETWORK, AGGREGATOR, ENSEMBLE = "snapshotter", "network", "aggregator", "streaming"


@dataclass(frozen=True)
class StreamShape:
    channels: int = 2
    update_samples: int = 4  # samples per request (hermes' stride)
    window_samples: int = 16  # the snapshot the network sees; a multiple of update_samples
    kernel_samples: int = 3  # the network's convolution
    seed: int = 7

    @property
    def windows_per_sample(self) -> int:
        return self.window_samples // self.update_samples


def _sequence_batching(state: str, dims: list[int]) -> str:
    return f"""
sequence_batching {{
  max_sequence_idle_microseconds: 10000000
  direct {{ }}
  state [ {{
    input_name: "input_{state}" output_name: "output_{state}" data_type: TYPE_FP32 dims: {dims}
    initial_state: {{ data_type: TYPE_FP32 dims: {dims} zero_data: true name: "{state}" }}
  }} ]
}}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def _config(name: str, inputs: dict[str, list[int]], outputs: dict[str, list[int]], extra: str = "") -> str:
    def tensors(entries: dict[str, list[int]]) -> str:
        return ", ".join(f'{{ name: "{n}" data_type: TYPE_FP32 dims: {d} }}' for n, d in entries.items())

    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        f"input [ {tensors(inputs)} ]\noutput [ {tensors(outputs)} ]\n{extra}"
    )


def _write(root: Path, name: str, graph: Any, config: str) -> None:
    save_graph(graph, root / name / "1" / "model.onnx")
    (root / name / "config.pbtxt").write_text(config)


def _ints(name: str, values: list[int]) -> Any:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _snapshotter(root: Path, shape: StreamShape) -> None:
    c, u, s = shape.channels, shape.update_samples, shape.window_samples
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Slice", ["input_snapshot", "u", "s", "two"], ["kept"]),
            helper.make_node("Concat", ["kept", "snapshot_update"], ["window"], axis=2),
            helper.make_node("Identity", ["window"], ["network.witness_snapshot"]),
            helper.make_node("Identity", ["window"], ["output_snapshot"]),
        ],
        SNAPSHOTTER,
        [
            info("snapshot_update", TensorProto.FLOAT, [1, c, u]),
            info("input_snapshot", TensorProto.FLOAT, [1, c, s]),
        ],
        [
            info("network.witness_snapshot", TensorProto.FLOAT, [1, c, s]),
            info("output_snapshot", TensorProto.FLOAT, [1, c, s]),
        ],
        initializer=[_ints("u", [u]), _ints("s", [s]), _ints("two", [2])],
    )
    config = _config(
        SNAPSHOTTER,
        {"snapshot_update": [1, c, u]},
        {"network.witness_snapshot": [1, c, s]},
        _sequence_batching("snapshot", [1, c, s]),
    )
    _write(root, SNAPSHOTTER, graph, config)


def _network(root: Path, shape: StreamShape) -> None:
    c, s, k = shape.channels, shape.window_samples, shape.kernel_samples
    rng = np.random.default_rng(shape.seed)
    weight = (rng.normal(size=(1, c, k)) * 0.5).astype(np.float32)
    bias = rng.normal(size=(1,)).astype(np.float32)
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["witness", "weight", "bias"], ["conv"], pads=[k // 2, k - 1 - k // 2]),
            helper.make_node("Tanh", ["conv"], ["activated"]),
            helper.make_node("Reshape", ["activated", "flat"], ["prediction"]),
        ],
        NETWORK,
        [info("witness", TensorProto.FLOAT, [1, c, s])],
        [info("prediction", TensorProto.FLOAT, [1, s])],
        initializer=[
            numpy_helper.from_array(weight, "weight"),
            numpy_helper.from_array(bias, "bias"),
            _ints("flat", [1, s]),
        ],
    )
    # Two instances: without ordering, a later update could overtake an earlier one here.
    extra = "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
    _write(root, NETWORK, graph, _config(NETWORK, {"witness": [1, c, s]}, {"prediction": [1, s]}, extra))


def _aggregator(root: Path, shape: StreamShape) -> None:
    u, s = shape.update_samples, shape.window_samples
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Slice", ["input_online_average", "u", "s", "one"], ["tail"]),
            helper.make_node("Concat", ["tail", "zeros"], ["shifted"], axis=1),
            helper.make_node("Add", ["shifted", "update"], ["sums"]),
            helper.make_node("Slice", ["sums", "zero", "u", "one"], ["done"]),
            helper.make_node("Mul", ["done", "inverse"], ["output_stream"]),
            helper.make_node("Identity", ["sums"], ["output_online_average"]),
        ],
        AGGREGATOR,
        [info("update", TensorProto.FLOAT, [1, s]), info("input_online_average", TensorProto.FLOAT, [1, s])],
        [
            info("output_stream", TensorProto.FLOAT, [1, u]),
            info("output_online_average", TensorProto.FLOAT, [1, s]),
        ],
        initializer=[
            _ints("zero", [0]),
            _ints("one", [1]),
            _ints("u", [u]),
            _ints("s", [s]),
            numpy_helper.from_array(np.zeros((1, u), dtype=np.float32), "zeros"),
            numpy_helper.from_array(np.array(1 / shape.windows_per_sample, dtype=np.float32), "inverse"),
        ],
    )
    config = _config(
        AGGREGATOR,
        {"update": [1, s]},
        {"output_stream": [1, u]},
        _sequence_batching("online_average", [1, s]),
    )
    _write(root, AGGREGATOR, graph, config)


def ensemble_config(shape: StreamShape, name: str = ENSEMBLE) -> str:
    c, u = shape.channels, shape.update_samples
    return f"""
name: "{name}"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "snapshot_update" data_type: TYPE_FP32 dims: [ 1, {c}, {u} ] }} ]
output [ {{ name: "output_stream" data_type: TYPE_FP32 dims: [ 1, {u} ] }} ]
ensemble_scheduling {{
  step [
    {{ model_name: "{SNAPSHOTTER}" model_version: -1
       input_map {{ key: "snapshot_update" value: "snapshot_update" }}
       output_map {{ key: "network.witness_snapshot" value: "witness_snapshot" }} }},
    {{ model_name: "{NETWORK}" model_version: -1
       input_map {{ key: "witness" value: "witness_snapshot" }}
       output_map {{ key: "prediction" value: "prediction" }} }},
    {{ model_name: "{AGGREGATOR}" model_version: -1
       input_map {{ key: "update" value: "prediction" }}
       output_map {{ key: "output_stream" value: "output_stream" }} }}
  ]
}}
"""


def write_streaming_pipeline(root: Path, shape: StreamShape = StreamShape()) -> Path:
    """The four model folders under ``root``; returns ``root``."""
    _snapshotter(root, shape)
    _network(root, shape)
    _aggregator(root, shape)
    (root / ENSEMBLE / "1").mkdir(parents=True, exist_ok=True)
    (root / ENSEMBLE / "config.pbtxt").write_text(ensemble_config(shape))
    return root


class DirectStreaming:
    """The pipeline run in this process with onnxruntime; the caller's sequences each keep their states."""

    def __init__(self, root: Path, shape: StreamShape = StreamShape()) -> None:
        import onnxruntime  # noqa: PLC0415  (only the tests that compare need it)

        def session(name: str) -> Any:
            return onnxruntime.InferenceSession(str(root / name / "1" / "model.onnx"))

        self._shape = shape
        self._snapshotter, self._network, self._aggregator = (
            session(n) for n in (SNAPSHOTTER, NETWORK, AGGREGATOR)
        )
        self._states: dict[object, tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]] = {}

    def start(self, sequence: object) -> None:
        c, s = self._shape.channels, self._shape.window_samples
        self._states[sequence] = (np.zeros((1, c, s), np.float32), np.zeros((1, s), np.float32))

    def update(self, sequence: object, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        snapshot, average = self._states[sequence]
        window, snapshot = self._snapshotter.run(
            None, {"snapshot_update": samples, "input_snapshot": snapshot}
        )
        (prediction,) = self._network.run(None, {"witness": window})
        output, average = self._aggregator.run(None, {"update": prediction, "input_online_average": average})
        self._states[sequence] = (snapshot, average)
        return np.asarray(output, dtype=np.float32)
