# A Python model with implicit state: the running sum lives in the sequence batcher's state, not in the
# model. The server feeds SUM_IN (zeros at START) and keeps the SUM_OUT the model returns for the next request.
import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            state = pb_utils.get_input_tensor_by_name(request, "SUM_IN").as_numpy()
            total = (state + value).astype(np.float32)
            outputs = [pb_utils.Tensor("SUM", total), pb_utils.Tensor("SUM_OUT", total)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
