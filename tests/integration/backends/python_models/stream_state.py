# The stateful ends of the streaming pipeline as Python models keeping each sequence's state themselves
# (Triton 2.51's Python backend feeds implicit state's initial value on every request). The config's
# parameter "role" picks the snapshotter (window of the last samples) or the online aggregator (average
# of the overlapping predictions); "window_samples" and "update_samples" are the window and update lengths.
import json

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.role = parameters["role"]["string_value"]
        self.window = int(parameters["window_samples"]["string_value"])
        self.update = int(parameters["update_samples"]["string_value"])
        self.states = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            sequence = request.correlation_id()
            flags = request.flags()
            if self.role == "snapshotter":
                update = pb_utils.get_input_tensor_by_name(request, "snapshot_update").as_numpy()
                size = self.update
                if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START or sequence not in self.states:
                    self.states[sequence] = np.zeros((1, update.shape[1], self.window), np.float32)
                state = np.concatenate([self.states[sequence][:, :, size:], update], axis=2)
                output = pb_utils.Tensor("network.witness_snapshot", state)
            else:
                update = pb_utils.get_input_tensor_by_name(request, "update").as_numpy()
                size = self.update
                if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START or sequence not in self.states:
                    self.states[sequence] = np.zeros((1, self.window), np.float32)
                shifted = np.concatenate(
                    [self.states[sequence][:, size:], np.zeros((1, size), np.float32)], axis=1
                )
                state = (shifted + update).astype(np.float32)
                done = state[:, :size] * np.float32(size / self.window)
                output = pb_utils.Tensor("output_stream", done.astype(np.float32))
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                self.states.pop(sequence, None)
            else:
                self.states[sequence] = state
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
