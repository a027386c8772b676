"""One branch of the diamond ensemble: waits at a barrier shared with the other branch, then scales."""

import json

import numpy as np
import sonic_test_rendezvous

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.factor = np.float32(config["parameters"]["factor"]["string_value"])

    def execute(self, requests):
        sonic_test_rendezvous.BARRIER.wait()
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUT", (x * self.factor).astype(np.float32))])
            )
        return responses
