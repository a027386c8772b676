"""A BYTES output built from the numpy array that input CASE picks: object arrays of ints, floats, str,
bytes, a mix, a fixed-width bytes array, a str array (which Triton's Python backend refuses)."""

import numpy as np

import triton_python_backend_utils as pb_utils

CASES = {
    "ints": lambda: np.array([1, 2], dtype=np.object_),
    "floats": lambda: np.array([1.5, 2.0], dtype=np.object_),
    "str": lambda: np.array(["a", "\u00e9"], dtype=np.object_),
    "bytes": lambda: np.array([b"x", b"\x00y"], dtype=np.object_),
    "mixed": lambda: np.array([1, "s", b"b", 1.5, True, None], dtype=np.object_),
    "numpy scalars": lambda: np.array([np.float32(1.5), np.int64(3), np.bytes_(b"q")], dtype=np.object_),
    "fixed-width bytes": lambda: np.array([b"ab", b"c"]),
    "str array": lambda: np.array(["ab", "c"]),
}
NAMES = list(CASES)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            case = NAMES[int(pb_utils.get_input_tensor_by_name(request, "CASE").as_numpy()[0])]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", CASES[case]())]))
        return responses
