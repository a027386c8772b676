"""Edge cases asked of ``sonic serve`` and of real NVIDIA Triton 2.51 alike, with what Triton answers.

BYTES outputs a Python model builds from object arrays of anything; JSON ``data`` of the wrong JSON
type; too few inputs where one is optional; offsets past a shared-memory region; a region unregistered
while a request that reads or writes it is in flight (the ``gated_copy`` model holds each execute
until the test lets it go on, so "in flight" is known, not waited for). Where sonic answers differently
on purpose, the test says which row of docs/triton-differences.md it is.
"""

from __future__ import annotations

import http.client
import json
import queue
import socket
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tests.integration.triton_helpers import SERVERS, Endpoint, serving
from tritonclient.utils import InferenceServerException

pytestmark = [pytest.mark.integration]

PYTHON_MODELS = Path(__file__).parent / "python_models"
GATE_TIMEOUT_S = 60.0
JSON_TYPES = ("FP32", "FP64", "BOOL", "INT8", "INT32", "INT64", "UINT8", "UINT32", "UINT64", "BYTES")
BYTES_CASES = [  # the model's cases, in its order, and what Triton 2.51 answers for each (probed)
    ("ints", [b"1", b"2"]),
    ("floats", [b"1.5", b"2.0"]),
    ("str", [b"a", "\u00e9".encode()]),
    ("bytes", [b"x", b"\x00y"]),
    ("mixed", [b"1", b"s", b"b", b"1.5", b"True", b"None"]),
    ("numpy scalars", [b"1.5", b"3", b"q"]),
    ("fixed-width bytes", [b"ab", b"c"]),
]


def _config(name: str, inputs: str, output: str, extra: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "python"\ninput [\n{inputs}\n]\noutput [ {output} ]\n'
        f"instance_group [ {{ kind: KIND_CPU count: 1 }} ]\n{extra}"
    )


def _models(gate_port: int) -> dict[str, tuple[str, str]]:
    """Model name: (config, model file of python_models)."""
    typed = ",\n".join(
        f'  {{ name: "I_{t}" data_type: TYPE_{"STRING" if t == "BYTES" else t} dims: [ -1 ] optional: true }}'
        for t in JSON_TYPES
    )
    optional = ",\n".join(
        f'  {{ name: "{n}" data_type: TYPE_FP32 dims: [ 1 ]{" optional: true" if n == "D" else ""} }}'
        for n in "ABCD"
    )
    return {
        "bytes_kinds": (
            _config(
                "bytes_kinds",
                '  { name: "CASE" data_type: TYPE_INT32 dims: [ 1 ] }',
                '{ name: "OUT" data_type: TYPE_STRING dims: [ -1 ] }',
            ),
            "bytes_kinds.py",
        ),
        "typed": (_config("typed", typed, '{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }'), "zeros.py"),
        "optional": (
            _config("optional", optional, '{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }'),
            "zeros.py",
        ),
        "gated_copy": (
            _config(
                "gated_copy",
                '  { name: "X" data_type: TYPE_FP32 dims: [ 4 ] }',
                '{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }',
                f'parameters {{ key: "gate_port" value: {{ string_value: "{gate_port}" }} }}\n',
            ),
            "gated_copy.py",
        ),
    }


class Gate:
    """Where ``gated_copy``'s executes wait: each connects, and goes on when the test sends it a byte.

    Held (the default), each connection is queued for :meth:`entered`; :meth:`open` lets those and any
    later ones go on at once, until :meth:`hold`. Closing the gate lets every waiting execute go on.
    """

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._waiting: queue.Queue[socket.socket] = queue.Queue()
        self._lock = threading.Lock()
        self._open = False
        self._thread = threading.Thread(target=self._accept, name="gate", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # the listener is shut down
                return
            with self._lock:
                if self._open:
                    self.let_go(connection)
                else:
                    self._waiting.put(connection)

    def entered(self) -> socket.socket:
        """The next execute that reached the gate (an execute in flight), to :meth:`let_go` later."""
        return self._waiting.get(timeout=GATE_TIMEOUT_S)

    @staticmethod
    def let_go(connection: socket.socket) -> None:
        with connection:
            connection.sendall(b"g")

    def open(self) -> None:
        with self._lock:
            self._open = True
            while not self._waiting.empty():
                self.let_go(self._waiting.get_nowait())

    def hold(self) -> None:
        with self._lock:
            self._open = False

    def close(self) -> None:
        self.open()
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(GATE_TIMEOUT_S)


@pytest.fixture(scope="module")
def gate() -> Iterator[Gate]:
    gate = Gate()
    yield gate
    gate.close()


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory, gate: Gate) -> Path:
    repo = tmp_path_factory.mktemp("edge") / "models"
    for name, (config, model_file) in _models(gate.port).items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config, encoding="utf-8")
        (repo / name / "1" / "model.py").write_bytes((PYTHON_MODELS / model_file).read_bytes())
    return repo


@pytest.fixture(scope="module", params=SERVERS)
def server(request: pytest.FixtureRequest, repository: Path, gate: Gate) -> Iterator[Endpoint]:
    with serving(request.param, repository, list(_models(gate.port))) as endpoint:
        yield endpoint


@pytest.fixture
def opened(gate: Gate) -> Iterator[Gate]:
    """The gate open for the test (no execute waits), held again after it."""
    gate.open()
    yield gate
    gate.hold()


def _code(exc: InferenceServerException) -> str:
    """The status as both clients say it: gRPC's name, HTTP's number."""
    return str(exc.status()).removeprefix("StatusCode.")


# --- BYTES outputs ---------------------------------------------------------------------------------------


def _case_input(module: Any, index: int) -> Any:
    tensor = module.InferInput("CASE", [1], "INT32")
    tensor.set_data_from_numpy(np.array([index], dtype=np.int32))
    return tensor


@pytest.mark.parametrize(("index", "case", "expected"), [(i, c, e) for i, (c, e) in enumerate(BYTES_CASES)])
def test_bytes_outputs_hold_the_text_of_each_element(
    server: Endpoint, index: int, case: str, expected: list[bytes]
) -> None:
    """Bytes as they are, anything else str(x) in UTF-8, on every protocol: the int 1 is b"1" (it was
    bytes(1), one zero byte, over gRPC and binary HTTP; a float was an INTERNAL error)."""
    with grpcclient.InferenceServerClient(server.grpc) as client:
        on_grpc = client.infer("bytes_kinds", [_case_input(grpcclient, index)]).as_numpy("OUT")
    http = httpclient.InferenceServerClient(server.http)
    try:
        binary = httpclient.InferRequestedOutput("OUT", binary_data=True)
        on_binary = http.infer("bytes_kinds", [_case_input(httpclient, index)], outputs=[binary]).as_numpy(
            "OUT"
        )
        as_json = httpclient.InferRequestedOutput("OUT", binary_data=False)
        result = http.infer("bytes_kinds", [_case_input(httpclient, index)], outputs=[as_json])
        on_json = result.get_response()["outputs"][0]["data"]
    finally:
        http.close()
    assert on_grpc is not None
    assert on_binary is not None
    assert on_grpc.tolist() == on_binary.tolist() == expected, case
    assert on_json == [item.decode() for item in expected]


def test_a_str_array_output_is_refused_in_tritons_words(server: Endpoint) -> None:
    index = len(BYTES_CASES)  # the model's "str array" case
    with (
        grpcclient.InferenceServerClient(server.grpc) as client,
        pytest.raises(InferenceServerException) as info,
    ):
        client.infer("bytes_kinds", [_case_input(grpcclient, index)])
    assert _code(info.value) == "INTERNAL"
    assert "NumPy dtype is not supported" in str(info.value.message())


# --- JSON data of the wrong JSON type ------------------------------------------------------------------

NON_NUMBER = "Unable to parse 'data': attempt to access JSON non-number as double"
NON_BOOLEAN = "Unable to parse 'data': attempt to access JSON non-boolean as boolean"
NON_SIGNED = "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
NON_UNSIGNED = "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"
NON_STRING = "Unable to parse JSON bytes array: attempt to access JSON non-string as string"


@pytest.mark.parametrize(
    ("datatype", "data", "words"),
    [
        ("FP32", [1.0, None], NON_NUMBER),
        ("FP64", [None], NON_NUMBER),
        ("FP32", ["x"], NON_NUMBER),
        ("FP32", [True], NON_NUMBER),
        ("BOOL", [True, None], NON_BOOLEAN),
        ("BOOL", [1], NON_BOOLEAN),
        ("INT32", [1, None], NON_SIGNED),
        ("INT64", [1.5], NON_SIGNED),
        ("INT8", [True], NON_SIGNED),
        ("UINT8", [None], NON_UNSIGNED),
        ("UINT32", [-1], NON_UNSIGNED),
        ("UINT64", [None], NON_UNSIGNED),
        ("BYTES", [None], NON_STRING),
    ],
)
def test_json_data_of_the_wrong_json_type_is_refused(
    server: Endpoint, datatype: str, data: list[object], words: str
) -> None:
    """null was NaN for FP32 and false for BOOL (200). Triton answers 500 with these words; sonic 400
    with them (row ``client-fault-not-internal``)."""
    body = {"inputs": [{"name": f"I_{datatype}", "shape": [len(data)], "datatype": datatype, "data": data}]}
    host, port = server.http.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=GATE_TIMEOUT_S)
    try:
        connection.request("POST", "/v2/models/typed/infer", body=json.dumps(body).encode())
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == (500 if server.kind == "triton" else 400)
    assert words in answer["error"]


# --- inputs, when one is optional ----------------------------------------------------------------------


def test_too_few_inputs_with_an_optional_one(server: Endpoint) -> None:
    expected = "expected number of inputs between 3 and 4 but got 2 inputs for model 'optional'"
    for module, address in ((grpcclient, server.grpc), (httpclient, server.http)):
        tensors = []
        for name in ("A", "B"):
            tensor = module.InferInput(name, [1], "FP32")
            tensor.set_data_from_numpy(np.ones(1, dtype=np.float32))
            tensors.append(tensor)
        client = module.InferenceServerClient(address)
        try:
            with pytest.raises(InferenceServerException) as info:
                client.infer("optional", tensors)
        finally:
            client.close()
        assert _code(info.value) in {"INVALID_ARGUMENT", "400"}
        assert expected in str(info.value.message())


# --- system shared memory -------------------------------------------------------------------------------


class Region:
    """A 64-byte POSIX shared-memory object of this test, registered under ``name`` (over gRPC)."""

    SIZE = 64

    def __init__(self, server: Endpoint, name: str) -> None:
        self.name = name
        self.key = f"/edge_{uuid.uuid4().hex[:12]}"
        self.handle = shm.create_shared_memory_region(name, self.key, self.SIZE)
        shm.set_shared_memory_region(self.handle, [np.arange(4, dtype=np.float32)])
        self.grpc = grpcclient.InferenceServerClient(server.grpc)
        self.http = httpclient.InferenceServerClient(server.http)
        self.grpc.register_system_shared_memory(name, self.key, self.SIZE)

    def registered(self) -> list[str]:
        return sorted(self.grpc.get_system_shared_memory_status(as_json=True).get("regions", {}))

    def close(self) -> None:
        try:
            self.grpc.unregister_system_shared_memory(self.name)
        finally:
            self.grpc.close()
            self.http.close()
            shm.destroy_shared_memory_region(self.handle)


@pytest.fixture
def region(server: Endpoint) -> Iterator[Region]:
    region = Region(server, f"edge_{uuid.uuid4().hex[:8]}")
    yield region
    region.close()


def _gated_call(
    module: Any, region: str, use: str, byte_size: int = 16, offset: int = 0
) -> tuple[Any, list[Any]]:
    """X and the requested Y of a ``gated_copy`` call: ``use`` "input" reads X from the region, "output"
    writes Y there."""
    tensor = module.InferInput("X", [4], "FP32")
    outputs = []
    if use == "input":
        tensor.set_shared_memory(region, byte_size, offset=offset)
    else:
        tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
        output = module.InferRequestedOutput("Y")
        output.set_shared_memory(region, byte_size, offset=offset)
        outputs.append(output)
    return tensor, outputs


@pytest.mark.usefixtures("opened")
@pytest.mark.parametrize("use", ["input", "output"])
@pytest.mark.parametrize(
    ("offset", "byte_size", "words"),
    [
        (100, 16, "Invalid offset for shared memory region"),
        (64, 0, "Invalid offset for shared memory region"),
        (60, 16, "Invalid offset + byte size for shared memory region"),
        (48, 32, "Invalid offset + byte size for shared memory region"),
    ],
)
def test_offsets_past_a_region(region: Region, use: str, offset: int, byte_size: int, words: str) -> None:
    """At inference, for inputs and outputs alike (at registration Triton says only `invalid args`)."""
    for module, client in ((grpcclient, region.grpc), (httpclient, region.http)):
        tensor, outputs = _gated_call(module, region.name, use, byte_size, offset)
        with pytest.raises(InferenceServerException) as info:
            client.infer("gated_copy", [tensor], outputs=outputs or None)
        assert _code(info.value) in {"INVALID_ARGUMENT", "400"}
        assert f"{words}: '{region.name}'" in str(info.value.message())


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("use", ["input", "output"])
def test_a_region_in_use_is_not_unregistered(
    server: Endpoint, region: Region, gate: Gate, protocol: str, use: str
) -> None:
    """Unregistering a region a request in flight reads or writes: INTERNAL/500 in Triton's words and the
    region stays; unregistering every region forgets the idle ones and keeps it. Once the request is
    done, the region unregisters."""
    spare = Region(server, f"{region.name}_spare")
    client: Any = region.grpc if protocol == "grpc" else region.http
    try:
        with ThreadPoolExecutor(1) as pool:
            tensor, outputs = _gated_call(grpcclient, region.name, use)
            answer = pool.submit(
                region.grpc.infer,
                "gated_copy",
                [tensor],
                outputs=outputs or None,
                client_timeout=GATE_TIMEOUT_S,
            )
            execute = gate.entered()  # the request is being executed: its region is in use
            try:
                with pytest.raises(InferenceServerException) as one:
                    client.unregister_system_shared_memory(region.name)
                assert _code(one.value) in {"INTERNAL", "500"}
                assert str(one.value.message()).startswith(
                    f"Cannot unregister shared memory region '{region.name}', it is currently in use."
                )
                assert spare.registered() == sorted([region.name, spare.name])
                with pytest.raises(InferenceServerException) as every:
                    client.unregister_system_shared_memory()
                assert _code(every.value) in {"INTERNAL", "500"}
                assert str(every.value.message()).startswith(
                    f"Failed to unregister the following system shared memory regions: {region.name} ,"
                )
                assert spare.registered() == [region.name]
            finally:
                Gate.let_go(execute)
            result = answer.result(timeout=GATE_TIMEOUT_S)
        if use == "input":
            np.testing.assert_array_equal(result.as_numpy("Y"), np.arange(4, dtype=np.float32))
        else:
            np.testing.assert_array_equal(
                shm.get_contents_as_numpy(region.handle, np.float32, [4]), np.arange(4)
            )
        client.unregister_system_shared_memory(region.name)  # the request is done: it goes now
        assert spare.registered() == []
    finally:
        spare.close()


def test_a_region_is_let_go_by_a_request_refused_after_running(opened: Gate, region: Region) -> None:
    """An output region too small for the answer: the request fails after the model ran, and the region
    is not held by it."""
    tensor, outputs = _gated_call(grpcclient, region.name, "output", byte_size=8)
    with pytest.raises(InferenceServerException):
        region.grpc.infer("gated_copy", [tensor], outputs=outputs)
    region.grpc.unregister_system_shared_memory(region.name)
    assert region.registered() == []


def test_a_region_is_let_go_by_a_request_past_its_deadline(gate: Gate, region: Region) -> None:
    """A request past its gRPC deadline while its execute waits: once that execute is over (the next
    request on the model's one instance is answered after it), the region unregisters."""
    tensor, _ = _gated_call(grpcclient, region.name, "input")
    with pytest.raises(InferenceServerException) as info:
        region.grpc.infer("gated_copy", [tensor], client_timeout=1.0)
    assert _code(info.value) == "DEADLINE_EXCEEDED"
    gate.open()
    try:
        after = grpcclient.InferInput("X", [4], "FP32")
        after.set_data_from_numpy(np.zeros(4, dtype=np.float32))
        region.grpc.infer("gated_copy", [after], client_timeout=GATE_TIMEOUT_S)
    finally:
        gate.hold()
    region.grpc.unregister_system_shared_memory(region.name)
    assert region.registered() == []
