"""Orderly shutdown over HTTP: SIGTERM lets requests in flight finish, then the server exits 0."""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration


def _send_all(address: str, arrays: list[np.ndarray]) -> list[object]:
    async def main() -> list[object]:
        async with aiohttpclient.InferenceServerClient(address) as client:

            async def one(array: np.ndarray) -> object:
                tensor = aiohttpclient.InferInput("INPUT0", list(array.shape), "FP32")
                tensor.set_data_from_numpy(array)
                return (await client.infer("slow", [tensor])).as_numpy("OUTPUT0")

            return await asyncio.gather(*(one(a) for a in arrays), return_exceptions=True)

    return asyncio.run(main())


def test_sigterm_drains_http_requests_in_flight(test_repository: Path) -> None:
    server = ServerProcess.start([test_repository], extra_args=["--http-port", "0"])
    try:
        arrays = [np.full((64, 512), index / 100, dtype=np.float32) for index in range(8)]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(_send_all, server.http_address, arrays)
            client = httpclient.InferenceServerClient(server.http_address)
            try:
                # Wait (by asking the server, not by sleeping) until requests are being executed.
                while client.get_inference_statistics("slow")["model_stats"][0]["execution_count"] == 0:
                    pass
            finally:
                client.close()
            server.process.send_signal(signal.SIGTERM)
            results = future.result(timeout=120)
        assert server.process.wait(timeout=60) == 0
    finally:
        server.stop()
    failures = [r for r in results if not isinstance(r, np.ndarray)]
    assert not failures, failures
    assert all(r.shape == (64, 512) for r in results)  # type: ignore[union-attr]
