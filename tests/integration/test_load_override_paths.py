"""Model-control load overrides cannot make the server open a file outside the model's folder.

Every field of a configuration that names a file (``sonic.server.models.paths.FILE_FIELDS``: the unit test
proves the list complete), each with an absolute name, a name climbing out with ``..`` and a name that
is a symbolic link out of the folder, sent as RepositoryModelLoad ``config`` over gRPC and over HTTP:
each is refused with INVALID_ARGUMENT / 400 naming the model and the field, nothing outside is
imported (a marker file would appear) and the answer tells nothing about the outside file (its size).
Links the repository holds (a model file, a model folder) are followed by default, as Triton follows
them, and refused with ``--refuse-model-links-outside``; an override's names never follow a link out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.integration.triton_helpers import running_triton
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess
from sonic.server.models.paths import FILE_FIELDS

pytestmark = pytest.mark.integration

IDENTITY = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""
TENSORS = {
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
}
SECRET_BYTES = 12345  # the outside file's size: no answer may tell it


@dataclass(frozen=True)
class Field:
    name: str  # key of FILE_FIELDS
    base: str  # the folder its names are relative to, inside the model's folder ("" : the folder itself)
    target: str  # what it points at outside: the Python file that leaves a marker, or the secret
    override: Callable[[str], dict[str, Any]]
    label: str  # how the refusal names the field


def _warmup(name: str) -> dict[str, Any]:
    data = {"data_type": "TYPE_FP32", "dims": [4], "input_data_file": name}
    return {"model_warmup": [{"name": "w", "batch_size": 1, "inputs": {"INPUT0": data}}]}


def _state(name: str) -> dict[str, Any]:
    initial = {"data_type": "TYPE_FP32", "dims": [1], "name": "i", "data_file": name}
    state = {"input_name": "S_IN", "output_name": "S_OUT", "data_type": "TYPE_FP32", "dims": [1]}
    return {"sequence_batching": {"state": [{**state, "initial_state": [initial]}]}}


FIELDS = [
    Field(
        "default_model_filename",
        "1",
        "evil.py",
        lambda n: {"default_model_filename": n},
        "default_model_filename",
    ),
    Field(
        "cc_model_filenames",
        "1",
        "evil.py",
        lambda n: {"cc_model_filenames": {"8.0": n}},
        "cc_model_filenames[8.0]",
    ),
    Field(
        "model_operations.op_library_filename",
        "",
        "evil.py",
        lambda n: {"model_operations": {"op_library_filename": [n]}},
        "model_operations.op_library_filename",
    ),
    Field(
        "model_warmup.inputs.input_data_file", "warmup", "secret", _warmup, "input 'INPUT0' input_data_file"
    ),
    Field("sequence_batching.state.initial_state.data_file", "initial_state", "secret", _state, "data_file"),
    Field(
        "output.label_filename",
        "",
        "secret",
        lambda n: {"output": [{**TENSORS["output"][0], "label_filename": n}]},
        "output 'OUTPUT0' label_filename",
    ),
]
VARIANTS = {"absolute": "absolute path", "dotdot": "climbs out with '..'", "link": "through a symbolic link"}


def test_every_file_field_is_tried() -> None:
    assert {f.name for f in FIELDS} == set(FILE_FIELDS)


@dataclass(frozen=True)
class Layout:
    root: Path
    repository: Path
    outside: Path
    marker: Path


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    root = tmp_path_factory.mktemp("override_paths")
    outside, repository = root / "outside", root / "models"
    outside.mkdir()
    marker = root / "IMPORTED"
    (outside / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n" + IDENTITY)
    (outside / "good.py").write_text(IDENTITY)
    (outside / "secret").write_bytes(b"s" * SECRET_BYTES)
    model = repository / "victim"
    for folder in ("1", "warmup", "initial_state"):
        (model / folder).mkdir(parents=True)
    (model / "1" / "model.py").write_text(IDENTITY)
    (model / "config.pbtxt").write_text('backend: "python"\n')
    (model / "warmup" / "ok.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    for field in FIELDS:  # one link out per field, in the folder its names are read from
        (model / field.base / f"link_{field.name}").symlink_to(outside / field.target)
    (model / "1" / "good_link.py").symlink_to(outside / "good.py")
    # The repository author's links: a model file and a whole model folder from elsewhere (e.g. CVMFS).
    (repository / "linked_file" / "1").mkdir(parents=True)
    (repository / "linked_file" / "config.pbtxt").write_text('backend: "python"\n')
    (repository / "linked_file" / "1" / "model.py").symlink_to(outside / "good.py")
    (outside / "folder" / "1").mkdir(parents=True)
    (outside / "folder" / "1" / "model.py").write_text(IDENTITY)
    (outside / "folder" / "config.pbtxt").write_text('backend: "python"\n')
    (repository / "linked_folder").symlink_to(outside / "folder")
    return Layout(root, repository, outside, marker)


def _name(layout: Layout, field: Field, variant: str) -> str:
    if variant == "absolute":
        return str(layout.outside / field.target)
    if variant == "dotdot":  # from the field's folder up to the root, then down into outside/
        depth = 2 + (1 if field.base else 0)
        return "../" * depth + f"outside/{field.target}"
    return f"link_{field.name}"


def _override(field: Field, name: str) -> str:
    return json.dumps({"backend": "python", **TENSORS, **field.override(name)})


def _load(
    protocol: str, address: str, model: str, config: str, files: dict[str, bytes] | None = None
) -> None:
    if protocol == "grpc":
        with grpcclient.InferenceServerClient(address) as client:
            client.load_model(model, config=config, files=files)
    else:
        with httpclient.InferenceServerClient(address) as client:
            client.load_model(model, config=config, files=files)


@pytest.fixture(scope="module")
def server(layout: Layout) -> Iterator[ServerProcess]:
    args = ["--model-control-mode", "explicit", "--http-port", "0"]
    with ServerProcess.start([layout.repository], extra_args=args) as process:
        yield process


def _address(server: ServerProcess, protocol: str) -> str:
    return server.grpc_address if protocol == "grpc" else server.http_address


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("field", FIELDS, ids=[f.name for f in FIELDS])
def test_load_override_cannot_name_a_file_outside(
    server: ServerProcess, layout: Layout, field: Field, variant: str, protocol: str
) -> None:
    name = _name(layout, field, variant)
    with pytest.raises(InferenceServerException) as info:
        _load(protocol, _address(server, protocol), "victim", _override(field, name))
    assert info.value.status() == ("StatusCode.INVALID_ARGUMENT" if protocol == "grpc" else "400")
    message = info.value.message()
    assert "model 'victim'" in message
    assert field.label in message
    assert VARIANTS[variant] in message
    assert str(SECRET_BYTES) not in message
    assert not layout.marker.exists()  # nothing outside was imported


def test_an_inside_warmup_file_loads(server: ServerProcess) -> None:
    # The control: the same override with a name inside the folder loads and serves.
    _load("grpc", server.grpc_address, "victim", _override(FIELDS[3], "ok.bin"))
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(np.ones(4, np.float32))
        assert client.infer("victim", [tensor]).as_numpy("OUTPUT0").tolist() == [1.0] * 4


def test_absolute_outside_file_and_missing_file_read_alike(server: ServerProcess, layout: Layout) -> None:
    messages = []
    for name in (layout.outside / "secret", layout.outside / "no_such_file"):
        with pytest.raises(InferenceServerException) as info:
            _load("http", server.http_address, "victim", _override(FIELDS[3], str(name)))
        messages.append(info.value.message().replace(str(name), "NAME"))
    assert messages[0] == messages[1]


LINK_MODES = {"default": [], "strict": ["--refuse-model-links-outside"]}


@pytest.mark.parametrize("mode", list(LINK_MODES))
def test_links_in_the_repository_load_by_default_only(layout: Layout, mode: str) -> None:
    args = ["--model-control-mode", "explicit", *LINK_MODES[mode]]
    with (
        ServerProcess.start([layout.repository], extra_args=args) as process,
        grpcclient.InferenceServerClient(process.grpc_address) as client,
    ):
        for model in ("linked_file", "linked_folder"):
            if mode == "default":
                client.load_model(model)
                assert client.is_model_ready(model)
                continue
            with pytest.raises(InferenceServerException) as info:
                client.load_model(model)
            assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
            assert f"model '{model}'" in info.value.message()
            assert "--refuse-model-links-outside" in info.value.message()


@pytest.mark.parametrize("mode", list(LINK_MODES))
def test_a_load_override_never_follows_a_link_out(layout: Layout, mode: str) -> None:
    # The link is the repository author's; the name is the caller's: refused whatever the server's mode.
    args = ["--model-control-mode", "explicit", *LINK_MODES[mode]]
    with ServerProcess.start([layout.repository], extra_args=args) as process:
        for variant, name in (
            ("link", "good_link.py"),
            ("absolute", _name(layout, FIELDS[0], "absolute")),
            ("dotdot", _name(layout, FIELDS[0], "dotdot")),
        ):
            with pytest.raises(InferenceServerException) as info:
                _load("grpc", process.grpc_address, "victim", _override(FIELDS[0], name))
            assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
            assert VARIANTS[variant] in info.value.message()
            assert "a load override may name only files inside its model's folder" in info.value.message()
        # The same link, loaded from the repository's own configuration, would be followed by default.
        with grpcclient.InferenceServerClient(process.grpc_address) as client:
            assert not client.is_model_ready("victim")
    assert not layout.marker.exists()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_file_overrides_are_refused(server: ServerProcess, layout: Layout, protocol: str) -> None:
    # Triton writes `file:` parameters into a temporary model folder; sonic loads from the repository only.
    files = {"file:1/model.py": IDENTITY.encode()}
    config = _override(FIELDS[0], "model.py")
    with pytest.raises(InferenceServerException) as info:
        _load(protocol, _address(server, protocol), "victim", config, files)
    assert info.value.status() == ("StatusCode.INVALID_ARGUMENT" if protocol == "grpc" else "400")
    assert "model file overrides ('file:1/model.py') are not supported" in info.value.message()
    assert not layout.marker.exists()


@pytest.mark.triton
def test_triton_follows_the_repositorys_links_alike(layout: Layout) -> None:
    with (
        running_triton([layout.repository], ["linked_file", "linked_folder"]) as triton,
        grpcclient.InferenceServerClient(triton.grpc_address) as client,
    ):
        assert client.is_model_ready("linked_file")
        assert client.is_model_ready("linked_folder")
