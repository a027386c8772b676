"""System shared memory over HTTP: register, status, inference through regions, unregister."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration

SIZE = 1024
KEY = "/sonic_http_test_region"


@pytest.fixture
def region(http_server: ServerProcess) -> Iterator[tuple[Any, httpclient.InferenceServerClient]]:
    handle = shm.create_shared_memory_region("sonic_http_test_region", KEY, SIZE)
    client = httpclient.InferenceServerClient(http_server.http_address)
    try:
        yield handle, client
    finally:
        client.unregister_system_shared_memory()
        client.close()
        shm.destroy_shared_memory_region(handle)


def test_register_status_unregister(region: tuple[Any, httpclient.InferenceServerClient]) -> None:
    _, client = region
    client.register_system_shared_memory("h1", KEY, 512, offset=256)
    client.register_system_shared_memory("h2", KEY, 128)
    assert client.get_system_shared_memory_status("h1") == [
        {"name": "h1", "key": KEY, "offset": 256, "byte_size": 512}
    ]
    assert [r["name"] for r in client.get_system_shared_memory_status()] == ["h1", "h2"]
    with pytest.raises(InferenceServerException) as info:
        client.register_system_shared_memory("h1", KEY, 512)
    assert info.value.status() == "400"  # Triton 2.51's answer to ALREADY_EXISTS
    with pytest.raises(InferenceServerException) as info:
        client.register_system_shared_memory("bad", KEY, SIZE + 1)
    assert info.value.status() == "400"
    client.unregister_system_shared_memory("h1")
    with pytest.raises(InferenceServerException) as info:
        client.get_system_shared_memory_status("h1")
    assert info.value.status() == "404"
    client.unregister_system_shared_memory()
    assert client.get_system_shared_memory_status() == []
    # As Triton without a GPU: no CUDA region, unregistering all is fine, registering one is not offered.
    assert client.get_cuda_shared_memory_status() == []
    client.unregister_cuda_shared_memory()
    with pytest.raises(InferenceServerException) as info:
        client.register_cuda_shared_memory("c", b"handle", 0, 64)
    assert info.value.status() == "501"


def test_inputs_and_outputs_in_shared_memory(region: tuple[Any, httpclient.InferenceServerClient]) -> None:
    handle, client = region
    x = np.arange(2 * 16, dtype=np.float32).reshape(2, 16)
    shm.set_shared_memory_region(handle, [x])
    client.register_system_shared_memory("io", KEY, SIZE)
    tensor = httpclient.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_shared_memory("io", x.nbytes)
    output = httpclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("io", x.nbytes, offset=512)
    result = client.infer("identity", [tensor], outputs=[output])
    described = result.get_output("OUTPUT0")
    # As Triton's: no data and no parameters (perf_analyzer's C++ client rejects shm parameters here).
    assert "parameters" not in described
    assert "data" not in described
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [2, 16], offset=512), x)
    # Mixed: one input from the region, one output back in the body.
    a = np.ones((1, 16), np.int32)
    shm.set_shared_memory_region(handle, [a])
    first = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    first.set_shared_memory("io", a.nbytes)
    second = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    second.set_data_from_numpy(a * 5)
    mixed = client.infer("add_sub", [first, second], outputs=[httpclient.InferRequestedOutput("OUTPUT0")])
    np.testing.assert_array_equal(mixed.as_numpy("OUTPUT0"), a * 6)
    missing = httpclient.InferInput("INPUT0", [2, 16], "FP32")
    missing.set_shared_memory("no_such_region", x.nbytes)
    with pytest.raises(InferenceServerException) as info:
        client.infer("identity", [missing])
    assert info.value.status() == "404"
