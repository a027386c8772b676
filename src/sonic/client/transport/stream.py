"""Small inference requests multiplexed on one ``ModelStreamInfer`` stream per server.

A unary gRPC call costs a new HTTP/2 stream, headers and a status on both ends; on a bidirectional
stream each request is one message. For small tensors that per-call cost dominates, so the gRPC
transport sends requests up to ``max_message_bytes`` here. Responses come back as the server
finishes them and are matched by request id.

Stream responses carry an error message but no status code. A request that fails inside the stream
is therefore sent once more as a unary call, whose status tells retryable from invalid.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

from grpc import aio

from sonic.client.errors import ClientError, ConnectionLostError
from sonic.protocol.errors import GrpcCode
from sonic.protocol.grpc_codec import Decoded, split_stream_response
from sonic.protocol.wire import SERVICE_PATH


class StreamFailedError(Exception):
    """A request failed inside the stream (``error_message``): resend it as a unary call."""


class InferStream:
    """One open stream: writes serialized by a lock, one reader task resolving futures by id."""

    def __init__(self, channel: aio.Channel, address: str, metadata: tuple[tuple[str, str], ...]) -> None:
        self._address = address
        self._call: Any = channel.stream_stream(SERVICE_PATH + "ModelStreamInfer", None, None)(
            None, metadata=metadata
        )
        self._pending: dict[str, asyncio.Future[Decoded]] = {}
        self._write_lock = asyncio.Lock()
        self._ids = itertools.count()
        self.broken: ClientError | None = None
        self._reader = asyncio.create_task(self._read(), name=f"sonic-stream-{address}")

    async def _read(self) -> None:
        try:
            while True:
                data = await self._call.read()
                if data is aio.EOF:  # type: ignore[attr-defined]  # grpc-stubs lacks it
                    msg = "the server closed the inference stream"
                    self._fail(ConnectionLostError(msg, status=GrpcCode.UNAVAILABLE, server=self._address))
                    return
                self._deliver(data)
        except aio.AioRpcError as exc:
            # Whatever its status, the stream as a whole is gone: every request on it must go again.
            detail = f"inference stream ended: {exc.code().name}: {exc.details()}"
            self._fail(ConnectionLostError(detail, status=GrpcCode.UNAVAILABLE, server=self._address))

    def _deliver(self, data: bytes) -> None:
        head, raw, error = split_stream_response(data)
        future = self._pending.pop(head.id, None)
        if future is None or future.done():
            return  # a request that timed out meanwhile
        if error:
            future.set_exception(StreamFailedError(error))
        else:
            future.set_result((head, raw))

    def _fail(self, error: ClientError) -> None:
        self.broken = error
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)

    async def infer(self, head: Any, tail: list[bytes | memoryview], timeout_s: float | None) -> Decoded:
        """Send one request (serialized head with its id set here, raw tensor fields) and await it."""
        if self.broken is not None:
            raise self.broken
        key = str(next(self._ids))
        head.id = f"{head.id}#{key}" if head.id else key
        payload = b"".join([head.SerializeToString(), *tail])
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        future: asyncio.Future[Decoded] = loop.create_future()
        self._pending[head.id] = future
        try:
            async with self._write_lock:
                if self.broken is not None:
                    raise self.broken
                try:
                    await self._call.write(payload)
                except (aio.AioRpcError, asyncio.InvalidStateError):
                    raise
                except Exception as exc:
                    # grpc raises its private ExecuteBatchError when the peer died mid-write: whatever
                    # the type, a failed write leaves the stream unusable for every request on it.
                    error = ConnectionLostError(
                        f"inference stream broke while writing: {exc!r}",
                        status=GrpcCode.UNAVAILABLE,
                        server=self._address,
                    )
                    self._fail(error)
                    raise error from exc
            if deadline is None:
                return await future
            result = await asyncio.wait_for(future, max(0.0, deadline - loop.time()))
            if loop.time() > deadline:
                # The deadline covers the write too: an answer that came while writing may still be late.
                raise TimeoutError
        except aio.AioRpcError as exc:
            # A failed write (grpc reports INTERNAL "execute_batch" when the peer died) breaks the whole
            # stream: every request on it, this one included, must go again.
            error = ConnectionLostError(
                f"inference stream broke: {exc.details()}", status=GrpcCode.UNAVAILABLE, server=self._address
            )
            self._fail(error)
            raise error from exc
        except asyncio.InvalidStateError:
            # The stream finished between our check and the write: the reader has the cause, or will.
            raise self._closed_error() from None
        finally:
            self._pending.pop(head.id, None)
            if future.done() and not future.cancelled():
                future.exception()  # failed by the reader while we were writing: mark it retrieved
            else:
                future.cancel()
        return result

    def _closed_error(self) -> ClientError:
        return self.broken or ConnectionLostError(
            "inference stream closed", status=GrpcCode.UNAVAILABLE, server=self._address
        )

    async def close(self) -> None:
        self._call.cancel()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
