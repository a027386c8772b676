"""BLS calls of decoupled models: ``exec(decoupled=True)`` / ``async_exec(decoupled=True)`` iterate over
the called model's responses; MODE 2 calls a decoupled model without ``decoupled=True``.

Input N (int32 [1]) goes to square_int32; outputs OUT (every OUT received, in order), COUNT (int32
[2]: responses iterated, how many of them were empty) and MSG (BYTES [-1], an error met).
MODE 3 iterates with ``decoupled=True`` over this (non-decoupled) model itself answering MODE 4, which
returns OUT = [N] (the config gives it two instances, so the call has one to run on).
"""

import numpy as np

import triton_python_backend_utils as pb_utils


def answer(values, count, empty, msg):
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("OUT", np.array(values, np.int32)),
            pb_utils.Tensor("COUNT", np.array([count, empty], np.int32)),
            pb_utils.Tensor("MSG", np.array([msg.encode()], np.object_)),
        ]
    )


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "N").as_numpy()
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            call = pb_utils.InferenceRequest(
                model_name="square_int32", inputs=[pb_utils.Tensor("IN", n)], requested_output_names=["OUT"]
            )
            values, count, empty, msg = [], 0, 0, ""
            if mode == 4:
                responses.append(answer(n.tolist(), 0, 0, "leaf"))
                continue
            if mode == 3:
                call = pb_utils.InferenceRequest(
                    model_name="bls_decoupled",
                    inputs=[pb_utils.Tensor("N", n), pb_utils.Tensor("MODE", np.array([4], np.int32))],
                    requested_output_names=["OUT", "MSG"],
                )
            if mode == 2:
                try:
                    result = call.exec()
                    msg = result.error().message() if result.has_error() else "no error"
                except Exception as exc:  # noqa: BLE001
                    msg = f"{type(exc).__name__}: {exc}"
                responses.append(answer(values, count, empty, msg))
                continue
            stream = call.exec(decoupled=True) if mode != 1 else await call.async_exec(decoupled=True)
            for result in stream:
                count += 1
                if result.has_error():
                    msg = result.error().message()
                    continue
                if not result.output_tensors():
                    empty += 1
                    continue
                values.extend(pb_utils.get_output_tensor_by_name(result, "OUT").as_numpy().tolist())
                leaf = pb_utils.get_output_tensor_by_name(result, "MSG")
                if leaf is not None:
                    msg = leaf.as_numpy()[0].decode()
            responses.append(answer(values, count, empty, msg))
        return responses
