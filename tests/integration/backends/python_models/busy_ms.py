# Works for MS milliseconds before it answers: a model slower than a client's timeout.
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            ms = int(pb_utils.get_input_tensor_by_name(request, "MS").as_numpy()[0])
            time.sleep(ms / 1000)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("DONE", np.array([ms], dtype=np.int32))]
                )
            )
        return responses
