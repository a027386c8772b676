"""NVIDIA's decoupled ``repeat_int32`` example (python_backend examples/decoupled), as Triton ships it.

One response per element of IN: OUT = IN[i], IDX = i, each after DELAY[i] milliseconds, sent from a
thread of the model; ``execute`` returns (None) after WAIT milliseconds, so requests overlap and
their responses interleave. The final flag goes alone after the last response (IN of shape [0]: no
response at all, only the final flag).
"""

import json
import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(self.model_config):
            raise pb_utils.TritonModelException(
                f"the model `{args['model_name']}` can generate any number of responses per request, "
                "enable decoupled transaction policy in model configuration to serve this model"
            )
        out_config = pb_utils.get_output_config_by_name(self.model_config, "OUT")
        idx_config = pb_utils.get_output_config_by_name(self.model_config, "IDX")
        self.out_dtype = pb_utils.triton_string_to_numpy(out_config["data_type"])
        self.idx_dtype = pb_utils.triton_string_to_numpy(idx_config["data_type"])
        self.inflight = 0
        self.idle = threading.Condition()

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            with self.idle:
                self.inflight += 1
            thread = threading.Thread(target=self.respond, args=(sender, values, delays), daemon=True)
            thread.start()
            wait_ms = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()[0]
            time.sleep(wait_ms / 1000)  # the model's own pacing, as in NVIDIA's example
        # A decoupled model's execute returns None: its responses go through the senders.

    def respond(self, sender, values, delays):
        try:
            for index in range(values.size):
                time.sleep(delays[index] / 1000)
                outputs = [
                    pb_utils.Tensor("OUT", np.array([values[index]], self.out_dtype)),
                    pb_utils.Tensor("IDX", np.array([index], self.idx_dtype)),
                ]
                sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        finally:
            with self.idle:
                self.inflight -= 1
                self.idle.notify_all()

    def finalize(self):
        # Wait for the response threads still sending, as NVIDIA's example does.
        with self.idle:
            self.idle.wait_for(lambda: self.inflight == 0, timeout=30)
