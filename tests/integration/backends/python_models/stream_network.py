# The streaming pipeline's network: the ONNX file next to this model.py, run with onnxruntime.
from pathlib import Path

import onnxruntime

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def execute(self, requests):
        responses = []
        for request in requests:
            witness = pb_utils.get_input_tensor_by_name(request, "witness").as_numpy()
            (prediction,) = self.session.run(None, {"witness": witness})
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("prediction", prediction)])
            )
        return responses
