"""BLS from ``async def execute``: two calls to other models in flight at once."""

import asyncio

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            network = pb_utils.InferenceRequest(
                model_name="torch_script",
                requested_output_names=["OUTPUT__0"],
                inputs=[
                    pb_utils.Tensor("INPUT__0", x),
                    pb_utils.Tensor("INPUT__1", np.zeros((x.shape[0], 3), dtype=np.float32)),
                ],
            )
            scaling = pb_utils.InferenceRequest(
                model_name="scale", requested_output_names=["SCALED"], inputs=[pb_utils.Tensor("RAW", x)]
            )
            answers = await asyncio.gather(network.async_exec(), scaling.async_exec())
            for answer in answers:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            probabilities = pb_utils.get_output_tensor_by_name(answers[0], "OUTPUT__0").as_numpy()
            scaled = pb_utils.get_output_tensor_by_name(answers[1], "SCALED").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("P", probabilities), pb_utils.Tensor("S", scaled)]
                )
            )
        return responses
