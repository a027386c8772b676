"""The response sender of a decoupled Python model's request (``request.get_response_sender()``).

As Triton 2.51's: ``send(response=None, flags=0)`` queues a response, ``flags`` may be
``TRITONSERVER_RESPONSE_COMPLETE_FINAL`` (alone: no response, only the end of the request), and the
misuses fail with Triton's words. ``is_cancelled()`` turns true when the client went away; later
responses are then dropped. A model that lets go of a request and its sender without the final flag
ends that request with an error, where it would otherwise never end.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy.typing as npt

from sonic.protocol.errors import InternalError, SonicError
from sonic.server.backends.pb_utils import (
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponse,
    TritonModelException,
)
from sonic.server.responses import ChannelClosedError, ResponseChannel, Streamed

Convert = Callable[[object], dict[str, npt.NDArray[Any]] | Exception]


class _Handle:
    """Held by a request and its sender: once both are gone, so is the model's last way to answer."""

    __slots__ = ("__weakref__",)


class InferenceResponseSender:
    """``pb_utils`` response sender of one request (made by the backend, given by the request)."""

    def __init__(self, channel: ResponseChannel, convert: Convert, handle: _Handle) -> None:
        self._channel = channel
        self._convert = convert
        self._handle = handle

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            msg = "Unable to send response. Unsupported flag provided."
            raise TritonModelException(msg)
        if flags == 0 and response is None:
            msg = "Inference Response object must be provided when the response flags is set to zero."
            raise TritonModelException(msg)
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if response is None:
            item = Streamed(None, None, final)
        else:
            converted = self._convert(response)
            if isinstance(converted, SonicError):
                item = Streamed(None, converted, final)
            elif isinstance(converted, Exception):
                item = Streamed(None, InternalError(str(converted)), final)
            else:
                item = Streamed(converted, None, final)
        try:
            self._channel.send(item)
        except ChannelClosedError:
            msg = "Unable to send response. Response sender has been closed."
            raise TritonModelException(msg) from None

    def is_cancelled(self) -> bool:
        return self._channel.cancelled


def attach_sender(request: InferenceRequest, channel: ResponseChannel, convert: Convert, where: str) -> None:
    """Give ``request`` its response sender; the request ends with an error if the model drops both
    without sending the final flag."""
    handle = _Handle()
    error = InternalError(
        f"{where}: the model released the request and its response sender without sending the final flag "
        "(send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL))"
    )
    weakref.finalize(handle, channel.end_with, error)
    request.set_response_sender(InferenceResponseSender(channel, convert, handle), handle)
