# Calls echo_parameters by BLS with its own request's correlation id, flags, timeout and parameters,
# and answers what echo_parameters saw.
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="echo_parameters",
                inputs=[pb_utils.get_input_tensor_by_name(request, "X")],
                requested_output_names=["PARAMETERS", "SEQUENCE"],
                correlation_id=request.correlation_id(),
                flags=request.flags(),
                timeout=request.timeout(),
                parameters=json.loads(request.parameters()),
            )
            answer = call.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            outputs = [
                pb_utils.get_output_tensor_by_name(answer, name) for name in ("PARAMETERS", "SEQUENCE")
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
