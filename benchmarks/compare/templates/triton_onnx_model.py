"""onnxruntime in Triton's Python backend, one ``session.run`` per batch (copied by benchmarks.compare).

Written as users write Triton models (untyped). Its settings come from ``compare_settings.json`` beside
it: the ONNX file, the intra-op threads, and the site-packages to put first on ``sys.path`` (Triton's
stub runs a bare interpreter that ignores the benchmark's virtualenv).
"""

import json
import sys
from pathlib import Path

SETTINGS = json.loads((Path(__file__).parent / "compare_settings.json").read_text())
sys.path[:0] = SETTINGS["paths"]

import numpy as np
import onnxruntime as ort

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        options = ort.SessionOptions()
        options.intra_op_num_threads = SETTINGS["threads"]
        options.add_session_config_entry("session.intra_op.allow_spinning", str(SETTINGS["spinning"]))
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(SETTINGS["onnx"], options, providers=["CPUExecutionProvider"])
        config = json.loads(args["model_config"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        feeds = [
            {n: pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in self.inputs} for r in requests
        ]
        if len(feeds) == 1:
            merged = feeds[0]
        else:
            merged = {n: np.concatenate([f[n] for f in feeds]) for n in self.inputs}
        results = self.session.run(self.outputs, merged)
        responses = []
        start = 0
        for f in feeds:
            rows = len(f[self.inputs[0]])
            tensors = [
                pb_utils.Tensor(n, np.ascontiguousarray(r[start : start + rows]))
                for n, r in zip(self.outputs, results, strict=True)
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += rows
        return responses
