"""Orderly shutdown over HTTP: SIGTERM lets requests in flight finish, then the server exits 0."""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.http.aio as aiohttpclient

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration


def _send_all(address: str, arrays: list[npt.NDArray[Any]]) -> list[Any]:
    async def main() -> list[Any]:
        async with aiohttpclient.InferenceServerClient(address) as client:

            async def one(array: npt.NDArray[Any]) -> Any:
                tensor = aiohttpclient.InferInput("INPUT0", list(array.shape), "FP32")
                tensor.set_data_from_numpy(array)
                return (await client.infer("slow", [tensor])).as_numpy("OUTPUT0")

            return await asyncio.gather(*(one(a) for a in arrays), return_exceptions=True)

    return asyncio.run(main())


def _arrived(server: ServerProcess) -> int:
    """Requests of "slow" the server has received: queued or executing, plus finished (Prometheus)."""
    with urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=10) as response:
        text = response.read().decode()
    names = (
        "nv_inference_pending_request_count",
        "nv_inference_request_success",
        "nv_inference_request_failure",
    )
    prefixes = tuple(f'{name}{{model="slow",' for name in names)
    return sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefixes))


def test_sigterm_drains_http_requests_in_flight(test_repository: Path) -> None:
    server = ServerProcess.start([test_repository], extra_args=["--http-port", "0", "--metrics-port", "0"])
    try:
        arrays = [np.full((64, 512), index / 100, dtype=np.float32) for index in range(8)]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(_send_all, server.http_address, arrays)
            # Wait (by asking the server, not by sleeping) until every request has arrived.
            while _arrived(server) < len(arrays):
                pass
            server.process.send_signal(signal.SIGTERM)
            results = future.result(timeout=120)
        assert server.process.wait(timeout=60) == 0
    finally:
        server.stop()
    failures = [r for r in results if not isinstance(r, np.ndarray)]
    assert not failures, failures
    assert all(r.shape == (64, 512) for r in results)
