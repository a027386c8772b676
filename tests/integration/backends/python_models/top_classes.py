# The input as scores in several datatypes, for the classification extension's tests. Decoupled (its
# config says so), it answers each request twice: the scores, then the scores reversed, then the end.
import json

import numpy as np

import triton_python_backend_utils as pb_utils


def _response(scores):
    outputs = [
        pb_utils.Tensor("SCORES", scores.astype(np.float32)),
        pb_utils.Tensor("COUNTS", scores.astype(np.uint8)),
        pb_utils.Tensor("HALF", scores.astype(np.float16)),
        pb_utils.Tensor("GRID", np.stack([scores, scores * 2], axis=-1).astype(np.float32)),
    ]
    return pb_utils.InferenceResponse(output_tensors=outputs)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)

    def execute(self, requests):
        responses = []
        for request in requests:
            scores = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if not self.decoupled:
                responses.append(_response(scores))
                continue
            sender = request.get_response_sender()
            sender.send(_response(scores))
            sender.send(_response(scores[..., ::-1]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None if self.decoupled else responses
