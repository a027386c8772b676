# The input as scores in several datatypes, for the classification extension's tests.
import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            scores = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            outputs = [
                pb_utils.Tensor("SCORES", scores.astype(np.float32)),
                pb_utils.Tensor("COUNTS", scores.astype(np.uint8)),
                pb_utils.Tensor("HALF", scores.astype(np.float16)),
                pb_utils.Tensor("GRID", np.stack([scores, scores * 2], axis=-1).astype(np.float32)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
