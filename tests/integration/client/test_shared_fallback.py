"""One fallback server per job: every client of the process shares it and loads its model on demand."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as tritonclient

from sonic.client import AsyncClient, ClientConfig, Device, FallbackConfig, SharedMemoryMode
from sonic.launch import free_port

pytestmark = pytest.mark.integration


def test_clients_of_several_models_share_one_fallback_server(sonic_repository: Path, tmp_path: Path) -> None:
    config = ClientConfig(
        servers=(f"127.0.0.1:{free_port()}",),  # nothing listens there
        control_timeout_s=2.0,
        shared_memory=SharedMemoryMode.OFF,
        fallback=FallbackConfig(
            enable=True, repositories=(sonic_repository,), device=Device.CPU, temp_dir=tmp_path
        ),
    )

    async def job() -> int:
        identity = AsyncClient("identity", config)
        small = AsyncClient("small_batch", config)
        try:
            x16, x4 = np.ones((2, 16), np.float32), np.ones((3, 4), np.float32)
            out16, out4 = await asyncio.gather(identity.infer({"INPUT0": x16}), small.infer({"INPUT0": x4}))
            np.testing.assert_array_equal(out16["OUTPUT0"], x16)
            np.testing.assert_array_equal(out4["OUTPUT0"], x4)
            assert identity._fallback.server is not None
            assert identity._fallback.server is small._fallback.server  # one server for both
            pid = identity._fallback.server.pid
            assert pid is not None
            address = identity._fallback.address
            control = tritonclient.InferenceServerClient(address)
            try:
                ready = {m.name for m in control.get_model_repository_index().models if m.state == "READY"}
            finally:
                control.close()
            assert ready == {"identity", "small_batch"}  # explicit mode: only what the clients asked for
            await identity.close()
            os.kill(pid, 0)  # still serving the other client
        finally:
            await identity.close()
            await small.close()
        return pid

    pid = asyncio.run(job())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the last client's close stopped it (and reaped it)
