"""A TensorFlow GraphDef in Triton's Python backend (copied by benchmarks.tensorflow_triton).

One session per instance, run through a callable made from ``CallableOptions`` (as sonic's TensorFlow
backend does), the requests of a batch merged into one run. Its settings come from
``tensorflow_settings.json`` beside it: the GraphDef, and the site-packages to put first on
``sys.path`` (Triton's stub runs a bare interpreter that ignores the benchmark's virtualenv).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SETTINGS = json.loads((Path(__file__).parent / "tensorflow_settings.json").read_text())
sys.path[:0] = SETTINGS["paths"]

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2

import triton_python_backend_utils as pb_utils


def _input(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    assert tensor is not None  # an input of the config: the server checked it was sent
    return tensor.as_numpy()


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(Path(SETTINGS["graphdef"]).read_bytes())
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        session_config = tf.compat.v1.ConfigProto()
        session_config.device_count["GPU"] = 0
        self.session = tf.compat.v1.Session(graph=graph, config=session_config)
        options = config_pb2.CallableOptions()
        options.feed.extend(n + ":0" for n in self.inputs)
        options.fetch.extend(n + ":0" for n in self.outputs)
        self.run = self.session._make_callable_from_options(options)

    def execute(self, requests: list[Any]) -> list[Any]:
        feeds = [[_input(r, n) for n in self.inputs] for r in requests]
        merged = (
            feeds[0] if len(feeds) == 1 else [np.concatenate(parts) for parts in zip(*feeds, strict=True)]
        )
        results = self.run(*merged)
        responses, start = [], 0
        for f in feeds:
            rows = len(f[0])
            tensors = [
                pb_utils.Tensor(n, np.ascontiguousarray(r[start : start + rows]))
                for n, r in zip(self.outputs, results, strict=True)
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += rows
        return responses
