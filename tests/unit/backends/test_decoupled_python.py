"""Decoupled Python models in-process: the response channel's order, bound and cancellation, and the
backend's sender (Triton's rules and words); servers and Triton itself: test_decoupled_parity.py."""

from __future__ import annotations

import asyncio
import gc
import threading
from pathlib import Path

import numpy as np
import pytest
from tests.unit.backends.test_python_backend import make_backend

from sonic.protocol.errors import InternalError, ModelConfigError
from sonic.protocol.errors import InvalidArgumentError as InvalidArgument
from sonic.protocol.model_config import fill_defaults, parse_config_text, validate_config
from sonic.server.backends.base import Request
from sonic.server.backends.onnxruntime import OnnxRuntimeBackend
from sonic.server.models.version import ModelVersion
from sonic.server.responses import ChannelClosedError, ResponseChannel, Streamed

pytestmark = pytest.mark.unit

DECOUPLED_CONFIG = """
name: "m"
backend: "python"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
model_transaction_policy { decoupled: true }
"""

DECOUPLED_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            sender = request.get_response_sender()
            if x[0, 0] == 1:  # two responses, then the final flag alone
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)]))
                sender.send(flags=FINAL)
            elif x[0, 0] == 2:  # a wrong dtype: an error for the client, not for the model
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x.astype(np.float64))]), FINAL)
            elif x[0, 0] == 3:  # a list, as a non-decoupled model returns
                return [pb_utils.InferenceResponse([]) for _ in requests]
            elif x[0, 0] == 4:
                raise pb_utils.TritonModelException("broken")
            # x == 5: forgets the request and its sender without the final flag
"""


def item(values: float) -> Streamed:
    return Streamed({"Y": np.full(2, values, np.float32)})


async def test_responses_come_in_order_and_a_send_past_the_bound_waits_for_the_reader() -> None:
    channel = ResponseChannel(max_queued=2)
    sent: list[int] = []

    def model() -> None:
        for index in range(5):
            channel.send(Streamed({"Y": np.array([index])}, final=index == 4))
            sent.append(index)

    thread = threading.Thread(target=model)
    thread.start()
    received: list[Streamed] = []
    while not received or not received[-1].final:
        # The sender is blocked on the bound until the reader takes one: never more than 2 ahead.
        received.append(await channel.get())
        assert len(sent) <= len(received) + 2
    await asyncio.to_thread(thread.join)
    assert [int(r.outputs["Y"][0]) for r in received if r.outputs is not None] == [0, 1, 2, 3, 4]
    with pytest.raises(ChannelClosedError):
        await asyncio.to_thread(channel.send, item(9))


async def test_cancel_wakes_a_blocked_sender_and_drops_later_responses() -> None:
    channel = ResponseChannel(max_queued=1)
    await asyncio.to_thread(channel.send, item(1))
    blocked = threading.Thread(target=channel.send, args=(item(2),))
    blocked.start()
    channel.cancel()
    await asyncio.to_thread(blocked.join)
    assert channel.cancelled
    await asyncio.to_thread(channel.send, item(3))  # dropped, no error: as Triton after a cancellation
    assert not blocked.is_alive()


async def test_sending_from_the_event_loop_thread_is_refused() -> None:
    channel = ResponseChannel()
    with pytest.raises(Exception, match="event loop thread"):
        channel.send(item(1))


async def test_end_with_ends_the_request_once() -> None:
    channel = ResponseChannel()
    channel.end_with(InvalidArgument("bad"))
    channel.end_with(InternalError("second"))  # the request has ended already: ignored
    answer = await channel.get()
    assert answer.final
    assert isinstance(answer.error, InvalidArgument)
    assert channel.final_sent


def test_max_queued_must_be_positive() -> None:
    async def make() -> None:
        ResponseChannel(max_queued=0)

    with pytest.raises(ValueError, match="max_queued must be at least 1"):
        asyncio.run(make())


def drain(channel: ResponseChannel, loop: asyncio.AbstractEventLoop) -> list[Streamed]:
    received: list[Streamed] = []
    while not received or not received[-1].final:
        received.append(asyncio.run_coroutine_threadsafe(channel.get(), loop).result(timeout=30))
    return received


async def test_the_backend_sends_through_the_channel_with_tritons_rules(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    backend = await asyncio.to_thread(make_backend, tmp_path, DECOUPLED_MODEL, DECOUPLED_CONFIG)
    try:
        channels = [ResponseChannel() for _ in range(5)]
        requests = [
            Request({"X": np.full((1, 2), value, np.float32)}, ["Y"], responses=channel)
            for value, channel in zip((1, 2, 5), channels[:3], strict=True)
        ]
        results = await asyncio.to_thread(backend.execute_requests, requests)
        assert results == [{}, {}, {}]  # execute returned None: the instance is free again
        gc.collect()  # request 3's objects are gone: its channel was ended for it
        first, second, alone, wrong, forgotten = await asyncio.to_thread(
            lambda: [*drain(channels[0], loop), *drain(channels[1], loop), *drain(channels[2], loop)]
        )
        assert first.outputs is not None
        assert second.outputs is not None
        assert not first.final
        assert not second.final
        assert alone == Streamed(None, None, final=True)  # the final flag sent alone
        np.testing.assert_array_equal(second.outputs["Y"], [[2.0, 2.0]])
        assert wrong.final
        assert isinstance(wrong.error, InternalError)
        assert "has numpy dtype float64" in wrong.error.message
        assert forgotten.final
        assert forgotten.error is not None
        assert "without sending the final flag" in forgotten.error.message

        returns_list = Request({"X": np.full((1, 2), 3, np.float32)}, ["Y"], responses=channels[3])
        (error,) = await asyncio.to_thread(backend.execute_requests, [returns_list])
        assert isinstance(error, InternalError)
        assert str(error.message).endswith(
            "is using the decoupled mode and the execute function must return None."
        )
        raises = Request({"X": np.full((1, 2), 4, np.float32)}, ["Y"], responses=channels[4])
        (failed,) = await asyncio.to_thread(backend.execute_requests, [raises])
        assert isinstance(failed, InternalError)
        assert failed.message == (
            "Failed to process the request(s) for model 'm_0_0', message: TritonModelException: broken"
        )
        (ended,) = await asyncio.to_thread(drain, channels[4], loop)
        assert ended.final
        assert ended.error is not None
    finally:
        await asyncio.to_thread(backend.close)


def test_only_backends_that_can_send_serve_decoupled_models() -> None:
    config = parse_config_text(DECOUPLED_CONFIG.replace('"python"', '"onnxruntime"'), "test")
    fill_defaults(config, default_filename="model.onnx", gpu_count=0)
    with pytest.raises(ModelConfigError, match="the onnxruntime backend cannot serve decoupled models"):
        ModelVersion.create(config, validate_config(config), 1, [], OnnxRuntimeBackend)
