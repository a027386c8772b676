"""Server side of the system shared-memory extension, driven by tritonclient's own shm utilities."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tritonclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.integration

SIZE = 1024


@pytest.fixture
def region(sonic_server: Any) -> Iterator[tuple[Any, tritonclient.InferenceServerClient]]:
    handle = shm.create_shared_memory_region("sonic_test_region", "/sonic_test_region", SIZE)
    client = tritonclient.InferenceServerClient(sonic_server.address)
    try:
        yield handle, client
    finally:
        client.unregister_system_shared_memory()
        client.close()
        shm.destroy_shared_memory_region(handle)


def _status(exc: pytest.ExceptionInfo[InferenceServerException]) -> str:
    return str(exc.value.status())


def test_register_status_unregister(region: tuple[Any, tritonclient.InferenceServerClient]) -> None:
    _, client = region
    client.register_system_shared_memory("r1", "/sonic_test_region", 512, offset=256)
    status = client.get_system_shared_memory_status("r1", as_json=True)["regions"]["r1"]
    assert (status["key"], int(status["offset"]), int(status["byte_size"])) == (
        "/sonic_test_region",
        256,
        512,
    )
    with pytest.raises(InferenceServerException) as exc:
        client.register_system_shared_memory("r1", "/sonic_test_region", 512)
    assert _status(exc) == "StatusCode.ALREADY_EXISTS"
    client.unregister_system_shared_memory("r1")
    with pytest.raises(InferenceServerException) as exc:
        client.get_system_shared_memory_status("r1")
    assert _status(exc) == "StatusCode.NOT_FOUND"


@pytest.mark.parametrize(
    ("key", "offset", "byte_size", "status"),
    [
        ("/sonic_no_such_key", 0, 16, "StatusCode.NOT_FOUND"),
        ("/sonic_test_region", 1000, 100, "StatusCode.INVALID_ARGUMENT"),
        ("/sonic_test_region", 0, SIZE + 1, "StatusCode.INVALID_ARGUMENT"),
    ],
)
def test_bad_registrations(
    region: tuple[Any, tritonclient.InferenceServerClient], key: str, offset: int, byte_size: int, status: str
) -> None:
    _, client = region
    with pytest.raises(InferenceServerException) as exc:
        client.register_system_shared_memory("bad", key, byte_size, offset=offset)
    assert _status(exc) == status


def test_inputs_and_outputs_in_shared_memory(region: tuple[Any, tritonclient.InferenceServerClient]) -> None:
    handle, client = region
    x = np.arange(2 * 16, dtype=np.float32).reshape(2, 16)
    shm.set_shared_memory_region(handle, [x])
    client.register_system_shared_memory("io", "/sonic_test_region", SIZE)
    tensor = tritonclient.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_shared_memory("io", x.nbytes)
    output = tritonclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("io", x.nbytes, offset=512)
    result = client.infer("identity", [tensor], outputs=[output])
    # As Triton: one empty raw_output_contents entry for the output that went to shared memory, and no
    # parameters on it (test_triton_api_parity checks the same against Triton itself).
    assert result.get_response().raw_output_contents == [b""]
    assert dict(result.get_output("OUTPUT0").parameters) == {}
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [2, 16], offset=512), x)


@pytest.mark.parametrize(
    ("region_name", "byte_size", "offset", "status", "message"),
    [
        ("nope", 128, 0, "StatusCode.NOT_FOUND", "Unable to find shared memory region: 'nope'"),
        ("io", 128, 1024, "StatusCode.INVALID_ARGUMENT", "Invalid offset for shared memory region: 'io'"),
        (
            "io",
            128,
            1000,
            "StatusCode.INVALID_ARGUMENT",
            "Invalid offset + byte size for shared memory region: 'io'",
        ),
        ("io", 64, 0, "StatusCode.INVALID_ARGUMENT", "input byte size mismatch for input 'INPUT0'"),
    ],
)
def test_bad_input_regions(
    region: tuple[Any, tritonclient.InferenceServerClient],
    region_name: str,
    byte_size: int,
    offset: int,
    status: str,
    message: str,
) -> None:
    _, client = region
    client.register_system_shared_memory("io", "/sonic_test_region", SIZE)
    tensor = tritonclient.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_shared_memory(region_name, byte_size, offset=offset)
    with pytest.raises(InferenceServerException) as exc:
        client.infer("identity", [tensor])
    assert _status(exc) == status
    assert message in str(exc.value)


def test_output_region_too_small(region: tuple[Any, tritonclient.InferenceServerClient]) -> None:
    _, client = region
    client.register_system_shared_memory("io", "/sonic_test_region", SIZE)
    tensor = tritonclient.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_data_from_numpy(np.zeros((2, 16), np.float32))
    output = tritonclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("io", 8)
    with pytest.raises(InferenceServerException) as exc:
        client.infer("identity", [tensor], outputs=[output])
    assert _status(exc) == "StatusCode.INVALID_ARGUMENT"
    assert "should be at least 128 bytes" in str(exc.value)
