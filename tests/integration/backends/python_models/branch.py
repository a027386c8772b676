"""One branch of the diamond ensemble: waits at a barrier shared with the other branch, then scales.

``MET`` says whether the other branch reached the barrier while this one waited there (1), or the
barrier broke on its timeout (0): the two steps did not run at the same time.
"""

import json
import threading

import numpy as np
import sonic_test_rendezvous

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.factor = np.float32(config["parameters"]["factor"]["string_value"])

    def execute(self, requests):
        try:
            sonic_test_rendezvous.BARRIER.wait()
            met = 1
        except threading.BrokenBarrierError:
            met = 0
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            outputs = [
                pb_utils.Tensor("OUT", (x * self.factor).astype(np.float32)),
                pb_utils.Tensor("MET", np.full((len(x), 1), met, dtype=np.int32)),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
