# Answers with the shape of INPUT as the model got it (SHAPE) and INPUT itself (OUTPUT).
import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            outputs = [
                pb_utils.Tensor("OUTPUT", value),
                pb_utils.Tensor("SHAPE", np.array(value.shape, dtype=np.int64)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
