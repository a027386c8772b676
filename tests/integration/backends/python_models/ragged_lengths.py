# Ragged input on the Python backend: reports how many requests one execute call got, and each
# request's own length, so a test sees requests of different lengths batched together.
import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            out = np.array([[len(requests), x.shape[1], float(x.sum())]], dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", out)]))
        return responses
