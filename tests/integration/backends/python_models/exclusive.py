# Holds a marker file while it executes and fails if another model holds it: it shows whether the rate
# limiter let two models that share one resource copy run at the same time. Triton's Python backend API.
import json
import os
import time
from pathlib import Path

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.marker = Path(parameters["marker_dir"]["string_value"]) / "running"
        self.work_s = float(parameters["work_s"]["string_value"])

    def execute(self, requests):
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            error = pb_utils.TritonError("another model was running at the same time")
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        try:
            time.sleep(self.work_s)  # the work: the window in which another model must not start
        finally:
            os.close(fd)
            self.marker.unlink()
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            out = pb_utils.Tensor("OUTPUT", (data + np.float32(1)).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
