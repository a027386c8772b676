# Answers each request with what Triton's Python backend shows of its parameters.
import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            sequence = json.dumps([request.correlation_id(), request.flags(), request.timeout()])
            outputs = [
                pb_utils.Tensor("PARAMETERS", np.array([request.parameters().encode()], dtype=np.object_)),
                pb_utils.Tensor("SEQUENCE", np.array([sequence.encode()], dtype=np.object_)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
