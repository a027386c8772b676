"""``sonic perf --shared-memory system``: slot sizes, the encoded requests, the regions' life, the flags."""

from __future__ import annotations

import asyncio
import mmap
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from sonic.cli.main import main
from sonic.client.shm import SHM_ROOT
from sonic.perf.inputs import InputSpec, ModelInfo
from sonic.perf.shm import (
    DEFAULT_OUTPUT_BYTES,
    SharedMemoryConfig,
    SharedMemoryKind,
    SystemSharedMemory,
    encode_shm_request,
    output_slot_bytes,
)
from sonic.perf.transport import PerfError
from sonic.protocol.types import ShmRef

pytestmark = pytest.mark.unit

INFO = ModelInfo(
    "m",
    8,
    (InputSpec("INPUT0", "FP32", (4,)), InputSpec("INPUT1", "INT64", (2,))),
    outputs=(InputSpec("OUTPUT0", "FP32", (4,)), InputSpec("OUTPUT1", "FP32", (-1,))),
)


class Recorder:
    """Registers nothing anywhere: records the calls, and fails the ones it is told to."""

    def __init__(self, *, fail_register_at: int = -1, fail_unregister: bool = False) -> None:
        self.registered: list[tuple[str, str, int, int]] = []
        self.unregistered: list[str] = []
        self._fail_register_at = fail_register_at
        self._fail_unregister = fail_unregister

    async def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if len(self.registered) == self._fail_register_at:
            raise PerfError(f"registering '{name}' refused")
        self.registered.append((name, key, offset, byte_size))

    async def shm_unregister(self, name: str) -> None:
        self.unregistered.append(name)
        if self._fail_unregister:
            raise PerfError(f"unregistering '{name}' failed: server gone")


def _params(parameters: object) -> dict[str, object]:
    """A tensor's parameters; an offset of 0 may be left out (Triton's default)."""
    result: dict[str, object] = {"shared_memory_offset": 0}
    for key, value in parameters.items():  # type: ignore[attr-defined]
        result[key] = value.string_param or value.int64_param
    return result


def _requests(count: int) -> list[dict[str, np.ndarray[tuple[int, ...], np.dtype[np.generic]]]]:
    return [
        {
            "INPUT0": np.full((3, 4), index, np.float32),
            "INPUT1": np.arange(6, dtype=np.int64).reshape(3, 2) + index,
        }
        for index in range(count)
    ]


def test_output_slots_follow_perf_analyzer() -> None:
    # fixed dims: the output's own size; variable dims or BYTES: --output-shared-memory-size; times the batch
    assert output_slot_bytes(InputSpec("O", "FP32", (48, 48, 1)), 3, 100) == 48 * 48 * 4 * 3
    assert output_slot_bytes(InputSpec("O", "FP16", (-1, 2)), 5, 100) == 500
    assert output_slot_bytes(InputSpec("O", "BYTES", (2,)), 2, 64) == 128


def test_config_refuses_cuda_and_a_size_that_is_not_positive() -> None:
    with pytest.raises(PerfError, match="sonic perf has no CUDA"):
        SharedMemoryConfig(SharedMemoryKind.CUDA)
    with pytest.raises(PerfError, match="positive byte count, got 0"):
        SharedMemoryConfig(SharedMemoryKind.SYSTEM, 0)
    assert SharedMemoryConfig().output_bytes == DEFAULT_OUTPUT_BYTES == 102_400
    assert not SharedMemoryConfig().used


def test_encoded_request_names_regions_and_carries_no_tensor_bytes() -> None:
    payload = encode_shm_request(
        "m",
        "2",
        [
            ("INPUT0", "FP32", (3, 4), ShmRef("in0", 48, 0)),
            ("INPUT1", "INT64", (3, 2), ShmRef("in0", 48, 64)),
        ],
        {"OUTPUT0": ShmRef("out", 48, 0), "OUTPUT1": ShmRef("out", 300, 64)},
    )
    request = service_pb2.ModelInferRequest.FromString(payload)
    assert (request.model_name, request.model_version) == ("m", "2")
    assert len(request.raw_input_contents) == 0
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [
        ("INPUT0", "FP32", [3, 4]),
        ("INPUT1", "INT64", [3, 2]),
    ]
    for tensor in request.inputs:
        assert not tensor.HasField("contents")
    assert [_params(t.parameters) for t in request.inputs] == [
        {"shared_memory_region": "in0", "shared_memory_byte_size": 48, "shared_memory_offset": 0},
        {"shared_memory_region": "in0", "shared_memory_byte_size": 48, "shared_memory_offset": 64},
    ]
    assert [(t.name, _params(t.parameters)) for t in request.outputs] == [
        (
            "OUTPUT0",
            {"shared_memory_region": "out", "shared_memory_byte_size": 48, "shared_memory_offset": 0},
        ),
        (
            "OUTPUT1",
            {"shared_memory_region": "out", "shared_memory_byte_size": 300, "shared_memory_offset": 64},
        ),
    ]


async def test_inputs_are_written_once_and_every_region_goes_at_the_end() -> None:
    recorder = Recorder()
    requests = _requests(2)
    async with SystemSharedMemory(recorder) as memory:
        payloads, serialize_ns = await memory.encode(INFO, "", requests, batch_size=3, output_bytes=1000)
        names = memory.region_names
        assert serialize_ns > 0
        assert len(names) == 3  # the output slots, then one region per distinct request
        assert all((SHM_ROOT / name).exists() for name in names)
        assert [r[0] for r in recorder.registered] == list(names)
        assert all(key == f"/{name}" and offset == 0 for name, key, offset, _ in recorder.registered)
        assert all(name.startswith("sonic_") for name in names)  # sonic.protocol.shm_names: reclaimable
        out_name = names[0]
        # OUTPUT0 fixed: 4 floats x batch 3; OUTPUT1 variable: 1000 bytes x batch 3, on a 64-byte boundary
        assert recorder.registered[0][3] == 64 + 3008  # each slot ends on a 64-byte boundary too
        for index, payload in enumerate(payloads):
            request = service_pb2.ModelInferRequest.FromString(payload)
            assert len(request.raw_input_contents) == 0
            outputs = {t.name: _params(t.parameters) for t in request.outputs}
            assert outputs == {
                "OUTPUT0": {
                    "shared_memory_region": out_name,
                    "shared_memory_byte_size": 48,
                    "shared_memory_offset": 0,
                },
                "OUTPUT1": {
                    "shared_memory_region": out_name,
                    "shared_memory_byte_size": 3000,
                    "shared_memory_offset": 64,
                },
            }  # the same slots for every request, as perf_analyzer
            with (
                (SHM_ROOT / names[index + 1]).open("rb") as handle,
                mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ) as region,
            ):
                for tensor in request.inputs:
                    place = _params(tensor.parameters)
                    assert place["shared_memory_region"] == names[index + 1]
                    start = int(str(place["shared_memory_offset"]))
                    size = int(str(place["shared_memory_byte_size"]))
                    assert region[start : start + size] == requests[index][tensor.name].tobytes()
    assert recorder.unregistered == list(names)
    assert not any((SHM_ROOT / name).exists() for name in names)


async def test_a_refused_registration_leaves_nothing_behind() -> None:
    recorder = Recorder(fail_register_at=1)
    memory = SystemSharedMemory(recorder)
    with pytest.raises(PerfError, match="refused"):
        async with memory:
            await memory.encode(INFO, "", _requests(2), batch_size=3, output_bytes=64)
    names = memory.region_names  # forgotten after close
    assert names == ()
    assert len(recorder.registered) == 1
    assert recorder.unregistered == [recorder.registered[0][0]]  # only what the server holds
    assert not list(SHM_ROOT.glob(f"{recorder.registered[0][0].rsplit('_', 1)[0]}_*"))


async def test_regions_are_unlinked_when_unregistering_fails(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder(fail_unregister=True)
    async with SystemSharedMemory(recorder) as memory:
        await memory.encode(INFO, "", _requests(1), batch_size=3, output_bytes=64)
        names = memory.region_names
    assert recorder.unregistered == list(names)
    assert not any((SHM_ROOT / name).exists() for name in names)
    assert "server gone" in caplog.text


async def test_a_cancelled_run_unlinks_its_regions() -> None:
    recorder = Recorder()
    memory = SystemSharedMemory(recorder)
    started = asyncio.Event()

    async def run() -> None:
        async with memory:
            await memory.encode(INFO, "", _requests(1), batch_size=3, output_bytes=64)
            started.set()
            await asyncio.Event().wait()  # the load, until cancelled

    task = asyncio.create_task(run())
    await started.wait()
    names = memory.region_names
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert recorder.unregistered == list(names)
    assert not any((SHM_ROOT / name).exists() for name in names)


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--shared-memory", "cuda"], 1, "--shared-memory cuda: sonic perf has no CUDA support"),
        (
            ["--output-shared-memory-size", "4096"],
            1,
            "--output-shared-memory-size applies with --shared-memory system",
        ),
        (["--shared-memory", "system", "--output-shared-memory-size", "0"], 1, "positive byte count, got 0"),
        (["--shared-memory", "system", "--replay", "."], 2, "--shared-memory is for load levels"),
    ],
)
def test_cli_refuses_what_it_cannot_do(
    argv: list[str], code: int, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 127.0.0.1:9 (discard): refused before any connection is tried
    assert main(["perf", "-m", "m", "-u", "127.0.0.1:9", *argv]) == code
    assert message in capsys.readouterr().err
