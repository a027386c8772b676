"""NVIDIA's decoupled ``square_int32`` example: IN (int32 [1]) = n gives n responses OUT = n, then the
final flag alone; n = 0 gives no response (only the final flag)."""

import threading

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.inflight = 0
        self.idle = threading.Condition()

    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            if n < 0:
                raise pb_utils.TritonModelException(f"IN must be at least 0, got {n}")
            with self.idle:
                self.inflight += 1
            sender = request.get_response_sender()
            threading.Thread(target=self.respond, args=(sender, n), daemon=True).start()
        # A decoupled model's execute returns None: its responses go through the senders.

    def respond(self, sender, n):
        try:
            for _ in range(n):
                out = pb_utils.Tensor("OUT", np.array([n], np.int32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        finally:
            with self.idle:
                self.inflight -= 1
                self.idle.notify_all()

    def finalize(self):
        with self.idle:
            self.idle.wait_for(lambda: self.inflight == 0, timeout=30)
