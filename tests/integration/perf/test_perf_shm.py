"""``sonic perf --shared-memory system`` against a real ``sonic serve`` (and Triton 2.51): requests name
regions, answers carry no tensor bytes, the server counts every request, and no region outlives the run."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from sonic.cli.main import main
from sonic.client.shm import SHM_ROOT
from sonic.launch import ServerProcess
from sonic.perf.engine import LoadLevel, PerfConfig, run_perf
from sonic.perf.inputs import model_info
from sonic.perf.shm import SharedMemoryConfig, SharedMemoryKind, SystemSharedMemory
from sonic.perf.transport import Transport

from ..triton_helpers import python_model_repository, running_triton
from .conftest import QUICK, PerfAnalyzer, success_count

pytestmark = pytest.mark.integration

QUICK_ARGS = ["--measurement-interval-s", "0.5", "--stable-windows", "2", "--max-windows", "3"]
QUICK_ARGS += ["--stability-percentage", "50"]


def _own_objects() -> set[str]:
    """This process's shared-memory objects (sonic.protocol.shm_names puts the creator's pid first)."""
    return {path.name for path in SHM_ROOT.glob(f"sonic_{os.getpid()}_*")}


def _server_regions(address: str) -> list[str]:
    """The system shared-memory regions the server holds registered."""
    client = grpcclient.InferenceServerClient(address)
    try:
        status = client.get_system_shared_memory_status(as_json=True)
    finally:
        client.close()
    return [region["name"] for region in status.get("regions", {}).values()]


@pytest.fixture
def no_leftovers(perf_server: ServerProcess) -> Iterator[None]:
    """The test leaves no object of its own in /dev/shm and no region registered with the server."""
    before = _own_objects()
    yield
    assert _own_objects() <= before
    assert not [
        name for name in _server_regions(perf_server.grpc_address) if name.startswith(f"sonic_{os.getpid()}_")
    ]


@pytest.mark.parametrize("transport", ["h2", "grpcio"])
def test_perf_with_system_shared_memory(
    perf_server: ServerProcess,
    transport: str,
    no_leftovers: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = success_count(perf_server.grpc_address, "identity")
    out = tmp_path / "r.json"
    code = main(
        [
            "perf", "-m", "identity", "-u", perf_server.grpc_address, "--concurrency", "1:2:x2", "-b", "4",
            "--shared-memory", "system", "--transport", transport, *QUICK_ARGS, "--json", str(out),
            "--csv", str(tmp_path / "r.csv"),
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "tensors in system shared memory (--output-shared-memory-size 102400)" in captured.err
    assert captured.out.count("(system shared memory):") == 2
    document = json.loads(out.read_text())
    assert document["shared_memory"] == {"kind": "system", "output_shared_memory_size": 102400}
    assert document["errors"] == 0
    measured = 0
    for result in document["results"]:
        assert result["shared_memory"] == "system"
        assert result["requests"] > 0
        assert result["server_inferences"] == 4 * result["server_requests"]
        measured += result["requests"]
    assert "system" in (tmp_path / "r.csv").read_text().splitlines()[1].split(",")
    # the server ran every request the generator counted (and those of the warm-up and the boundaries)
    assert success_count(perf_server.grpc_address, "identity") - before >= measured


async def test_requests_and_answers_carry_no_tensor_bytes(
    perf_server: ServerProcess, no_leftovers: None
) -> None:
    """One request as the load sends it: the identity's output lands in the output slot, not the answer."""
    async with Transport(perf_server.grpc_address, "identity", kind="grpcio") as transport:
        info = model_info(await transport.model_metadata(), await transport.model_config())
        x = np.random.default_rng(1).random((4, 16), dtype=np.float32)
        async with SystemSharedMemory(transport) as memory:
            (payload,), _ = await memory.encode(info, "", [{"INPUT0": x}], batch_size=4, output_bytes=1)
            assert len(service_pb2.ModelInferRequest.FromString(payload).raw_input_contents) == 0
            answer = bytes(await transport.infer(payload))
            assert len(answer) < x.nbytes
            response = service_pb2.ModelInferResponse.FromString(answer)
            # as Triton: one empty raw_output_contents per output in shared memory, and no parameters on it
            assert [len(raw) for raw in response.raw_output_contents] == [0]
            (output,) = response.outputs
            assert (output.name, list(output.shape)) == ("OUTPUT0", [4, 16])
            # the output slot (fixed dims: 16 floats x batch 4, whatever --output-shared-memory-size says)
            out_region = memory.region_names[0]
            written = np.frombuffer((SHM_ROOT / out_region).read_bytes()[: x.nbytes], np.float32)
            np.testing.assert_array_equal(written.reshape(x.shape), x)
            assert set(memory.region_names) <= set(_server_regions(perf_server.grpc_address))


def test_an_output_larger_than_its_slot_fails_and_leaves_nothing(
    perf_server: ServerProcess, no_leftovers: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # variable dims: the slot is --output-shared-memory-size per sample, 64 bytes for 1000 floats
    code = main(
        [
            "perf", "-m", "variable_dims", "-u", perf_server.grpc_address, "--shape", "INPUT0:1000",
            "--shared-memory", "system", "--output-shared-memory-size", "64", *QUICK_ARGS,
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert "requests in window 1 failed" in err
    assert "should be at least 4000 bytes to hold the results" in err


async def test_open_loop_with_system_shared_memory(perf_server: ServerProcess, no_leftovers: None) -> None:
    """A request rate: the requests the schedule started are answered before the regions go."""
    config = PerfConfig(
        url=perf_server.grpc_address,
        model="slow",
        levels=(LoadLevel(request_rate_per_s=40, distribution="poisson"),),
        batch_size=2,
        measurement=QUICK,
        shared_memory=SharedMemoryConfig(SharedMemoryKind.SYSTEM),
    )
    (result,) = (await run_perf(config)).results
    assert result.requests > 0
    assert result.errors_all_windows == 0


async def test_a_cancelled_run_gives_every_region_back(
    perf_server: ServerProcess, no_leftovers: None
) -> None:
    """Ctrl-C in the middle of a window: the requests in flight are answered, then every region goes."""
    window = asyncio.Event()
    config = PerfConfig(
        url=perf_server.grpc_address,
        model="slow",
        levels=(LoadLevel(concurrency=2),),
        batch_size=8,
        measurement=QUICK,
        shared_memory=SharedMemoryConfig(SharedMemoryKind.SYSTEM),
    )
    task = asyncio.create_task(run_perf(config, on_window=lambda *_: window.set()))
    await window.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# A Python-backend model of ~0.2 s per request: at the end of a level, or when cancelled, requests are in
# flight, and Triton holds their regions until it has run them (it refuses to unregister them meanwhile).
SLOW_CONFIG = """
name: "slow_identity"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""
SLOW_MODEL = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.2)
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""


def _slow_config(address: str) -> PerfConfig:
    return PerfConfig(
        url=address,
        model="slow_identity",
        levels=(LoadLevel(concurrency=2),),
        batch_size=4,
        measurement=QUICK,
        shared_memory=SharedMemoryConfig(SharedMemoryKind.SYSTEM),
    )


@pytest.mark.triton
async def test_triton_runs_the_same_load_and_gives_every_region_back(tmp_path: Path) -> None:
    repository = python_model_repository(tmp_path, "slow_identity", SLOW_CONFIG, SLOW_MODEL)
    before = _own_objects()
    with running_triton([repository], ["slow_identity"]) as triton:
        (result,) = (await run_perf(_slow_config(triton.grpc_address))).results
        assert result.requests > 0
        assert result.errors_all_windows == 0
        assert result.server is not None
        assert result.server.inferences == 4 * result.server.requests
        # the requests in flight at the level's end were answered before their regions were unregistered
        assert _server_regions(triton.grpc_address) == []
        assert _own_objects() <= before

        # cancelled (Ctrl-C) in the middle of a window: the same
        window = asyncio.Event()
        task = asyncio.create_task(
            run_perf(_slow_config(triton.grpc_address), on_window=lambda *_: window.set())
        )
        await window.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _server_regions(triton.grpc_address) == []
        assert _own_objects() <= before


@pytest.mark.parametrize(("size", "fits"), [(4000, True), (3999, False)])
def test_output_slots_are_sized_as_perf_analyzer_sizes_them(
    perf_server: ServerProcess,
    perf_analyzer: PerfAnalyzer,
    size: int,
    fits: bool,
    no_leftovers: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Variable dims: --output-shared-memory-size bytes per sample, times the batch. 1000 floats a sample,
    batch 2: 8000 bytes of output fit slots of 4000 per sample and not of 3999, for both load generators."""
    shape = ["--shape", "INPUT0:1000", "-b", "2", "--shared-memory", "system"]
    shape += ["--output-shared-memory-size", str(size)]
    command = [
        str(perf_analyzer.binary),
        *("-m", "variable_dims", "-i", "grpc", "-u", perf_server.grpc_address, "--concurrency-range", "1"),
        *("--measurement-mode", "count_windows", "--measurement-request-count", "10"),
        *("--stability-percentage", "1000", *shape),
    ]
    theirs = subprocess.run(
        command, env=perf_analyzer.env, capture_output=True, text=True, timeout=240, check=False
    )
    ours = main(["perf", "-m", "variable_dims", "-u", perf_server.grpc_address, *shape, *QUICK_ARGS])
    err = capsys.readouterr().err
    assert (theirs.returncode == 0) is fits, (theirs.stdout + theirs.stderr)[-3000:]
    assert (ours == 0) is fits, err
    if not fits:
        assert "should be at least 8000 bytes to hold the results" in theirs.stdout + theirs.stderr
        assert "should be at least 8000 bytes to hold the results" in err
