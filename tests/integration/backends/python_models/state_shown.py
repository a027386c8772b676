# A Python model with implicit state whose state output is also one of its configured outputs:
# OUTPUT = STATE_OUT = INPUT + STATE_IN.
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            total = value + pb_utils.get_input_tensor_by_name(request, "STATE_IN").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("STATE_OUT", total)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
