"""BLS: a Python model that calls another model of the server (torch_script)."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            call = pb_utils.InferenceRequest(
                model_name="torch_script",
                requested_output_names=["OUTPUT__0"],
                inputs=[
                    pb_utils.Tensor("INPUT__0", x),
                    pb_utils.Tensor("INPUT__1", np.zeros((x.shape[0], 3), dtype=np.float32)),
                ],
            )
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            probabilities = pb_utils.get_output_tensor_by_name(answer, "OUTPUT__0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("P", probabilities)]))
        return responses
