"""Y = X, once the test lets each execute go on: it connects to the test's gate (port in the config's
``gate_port`` parameter) and waits for one byte (or the gate's close), so the test knows a request is
being executed, for as long as it needs, without sleeping."""

import json
import socket

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.port = int(config["parameters"]["gate_port"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            with socket.create_connection(("127.0.0.1", self.port)) as gate:
                gate.recv(1)
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
