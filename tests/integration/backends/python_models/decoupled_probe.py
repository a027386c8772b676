"""A decoupled model whose MODE input picks one way of using (or misusing) the response sender, so the
same requests show what Triton and sonic answer for each.

Outputs: OUT (int32 [-1]) and MSG (BYTES [-1], messages the model caught or state it reports).
"""

import threading
import time

import numpy as np

import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def response(out=None, msg=None):
    tensors = []
    if out is not None:
        tensors.append(pb_utils.Tensor("OUT", np.array(out, np.int32)))
    if msg is not None:
        tensors.append(pb_utils.Tensor("MSG", np.array([m.encode() for m in msg], np.object_)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


def caught(call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001  (the message is the point)
        return f"{type(exc).__name__}: {exc}"
    return "no error"


class TritonPythonModel:
    def initialize(self, args):
        self.after_final = "nothing yet"
        self.cancelled = []
        self.noted = threading.Condition()
        self.flood_sent = 0
        self.flooded = None

    def execute(self, requests):
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            sender = request.get_response_sender()
            if mode == 0:  # data and the final flag together
                sender.send(response(out=[0]), flags=FINAL)
            elif mode == 1:  # data, then the final flag alone
                sender.send(response(out=[1]))
                sender.send(flags=FINAL)
            elif mode == 2:  # no response: only the final flag
                sender.send(flags=FINAL)
            elif mode == 3:  # misuse, caught; then sending after the final flag
                no_response = caught(lambda s=sender: s.send(None, 0))
                bad_flag = caught(lambda s=sender: s.send(response(out=[3]), 2))
                sender.send(response(out=[3], msg=[no_response, bad_flag]), flags=FINAL)
                self.after_final = caught(lambda s=sender: s.send(response(out=[3])))
                self.final_twice = caught(lambda s=sender: s.send(flags=FINAL))
            elif mode == 4:  # report what mode 3 met after its final flag
                sender.send(response(msg=[self.after_final, self.final_twice]), flags=FINAL)
            elif mode == 5:  # a list returned, as a non-decoupled model would
                return [response(out=[5]) for _ in requests]
            elif mode == 6:  # execute fails before sending anything
                raise pb_utils.TritonModelException("probe failure in execute")
            elif mode == 7:  # an error response, then the final flag
                error = pb_utils.TritonError("probe error response", pb_utils.TritonError.INVALID_ARG)
                sender.send(pb_utils.InferenceResponse(error=error))
                sender.send(flags=FINAL)
            elif mode == 8:  # send until the client goes away
                threading.Thread(target=self.until_cancelled, args=(request, sender), daemon=True).start()
            elif mode == 9:  # report what mode 8 saw, once it saw the cancellation
                with self.noted:
                    self.noted.wait_for(lambda: self.cancelled, timeout=30)
                    notes = list(self.cancelled) or ["mode 8 saw no cancellation within 30 s"]
                sender.send(response(msg=notes), flags=FINAL)
            elif mode == 10:  # the cancellation state of a live request
                states = [str(request.is_cancelled()), str(sender.is_cancelled())]
                sender.send(response(msg=states), flags=FINAL)
            elif mode == 11:  # sent after execute returned, from a thread, in order
                threading.Thread(target=self.later, args=(sender,), daemon=True).start()
            elif mode == 12:  # 2,000 responses of 64 KiB as fast as the server takes them
                threading.Thread(target=self.flood, args=(sender,), daemon=True).start()
            elif mode == 13:  # how far mode 12 got: done within 5 s, or how many it sent by then
                with self.noted:
                    done = self.noted.wait_for(lambda: self.flooded is not None, timeout=5)
                    state = [f"done={done}", str(self.flood_sent)]
                sender.send(response(msg=state), flags=FINAL)
        return None

    def later(self, sender):
        for index in range(20):
            sender.send(response(out=[index]))
        sender.send(flags=FINAL)

    def flood(self, sender):
        block = pb_utils.Tensor("OUT", np.zeros(16384, np.int32))
        while self.flood_sent < 2000 and not sender.is_cancelled():
            sender.send(pb_utils.InferenceResponse(output_tensors=[block]))
            self.flood_sent += 1
        with self.noted:
            self.flooded = caught(lambda: sender.send(flags=FINAL))
            self.noted.notify_all()

    def until_cancelled(self, request, sender):
        sent = 0
        deadline = time.monotonic() + 20
        while not sender.is_cancelled() and time.monotonic() < deadline:
            sender.send(response(out=[sent]))
            sent += 1
            time.sleep(0.005)
        note = f"cancelled={sender.is_cancelled()} request.is_cancelled={request.is_cancelled()}"
        final = caught(lambda: sender.send(flags=FINAL))
        with self.noted:
            self.cancelled.append(f"{note} final: {final}")
            self.noted.notify_all()
