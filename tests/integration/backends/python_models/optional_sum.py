# Sums the optional inputs A and B that the request gave; GIVEN says which (1: A, 2: B, 3: both).
import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            total = np.zeros(2, dtype=np.float32)
            given = 0
            for bit, name in ((1, "A"), (2, "B")):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    total = total + tensor.as_numpy()
                    given |= bit
            outputs = [
                pb_utils.Tensor("SUM", total.astype(np.float32)),
                pb_utils.Tensor("GIVEN", np.array([given], dtype=np.int32)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
