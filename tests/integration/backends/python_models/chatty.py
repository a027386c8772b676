"""Prints (and makes a C library write to file descriptor 1) on every request, as debugging models do."""

import ctypes

import triton_python_backend_utils as pb_utils

LIBC = ctypes.CDLL(None)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            print("chatty model got", x.shape, "#" * 4000, flush=True)
            LIBC.write(1, b"C library chatter " + b"#" * 4000 + b"\n", 4019)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
