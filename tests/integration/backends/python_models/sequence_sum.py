# A stateful Python model under the sequence batcher: a running sum per correlation id, reset at
# START, with the control inputs it saw (FLAGS = START + 2 END + 4 READY, CORR = CORRID).
import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = {
                name: pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                for name in ("INPUT", "START", "END", "READY", "CORRID")
            }
            corr = int(value["CORRID"][0])
            if value["START"][0]:
                self.sums[corr] = 0.0
            self.sums[corr] = self.sums.get(corr, 0.0) + float(value["INPUT"][0])
            flags = int(value["START"][0]) + 2 * int(value["END"][0]) + 4 * int(value["READY"][0])
            outputs = [
                pb_utils.Tensor("SUM", np.array([self.sums[corr]], dtype=np.float32)),
                pb_utils.Tensor("FLAGS", np.array([flags], dtype=np.int32)),
                pb_utils.Tensor("CORR", value["CORRID"].astype(np.uint64)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
