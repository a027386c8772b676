"""The path choke point (sonic.server.models.paths): every file a model configuration names stays in its folder.

Three kinds of proof: the rule itself (absolute, ``..``, links out, followed by default for the
repository's own names, refused with ``--refuse-model-links-outside`` and always for a load override's); completeness (every file-naming field of ModelConfig, found by walking
the protobuf descriptor, is listed and produced by ``config_file_names``); and a scan of the server's
source for code that reads a file-naming field without handing it to the choke point.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2

import sonic.server
from sonic.protocol.errors import InvalidArgumentError, ModelConfigError
from sonic.protocol.model_config import parse_config_text, validate_config
from sonic.server.backends.base import InstanceContext
from sonic.server.backends.hls4ml import Hls4mlBackend
from sonic.server.models.paths import (
    FILE_FIELDS,
    ConfigOrigin,
    ModelFiles,
    check_config_paths,
    config_file_names,
)
from sonic.server.models.repository import parse_version

pytestmark = pytest.mark.unit

# A configuration naming one file through each field of FILE_FIELDS.
EVERY_FIELD = """
default_model_filename: "NAME"
cc_model_filenames { key: "8.0" value: "NAME" }
model_operations { op_library_filename: "NAME" }
model_warmup [{ name: "w" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [1] input_data_file: "NAME" } } }]
sequence_batching { state [{ input_name: "s_in" output_name: "s_out" data_type: TYPE_FP32 dims: [1]
  initial_state [{ data_type: TYPE_FP32 dims: [1] name: "i" data_file: "NAME" }] }] }
output [{ name: "y" data_type: TYPE_FP32 dims: [1] label_filename: "NAME" }]
"""


def _names_files(field: FieldDescriptor) -> bool:
    name = field.name
    # "_file" and "filename", not "file": instance_group.profile names a TensorRT profile.
    return field.type == FieldDescriptor.TYPE_STRING and name.endswith(("_file", "filename", "filenames"))


def _file_fields(descriptor: Descriptor, prefix: str = "", seen: frozenset[str] = frozenset()) -> set[str]:
    """Dotted names of string fields (map values included) that name files, anywhere in ModelConfig."""
    found: set[str] = set()
    for field in descriptor.fields:
        dotted = f"{prefix}{field.name}"
        message = field.message_type
        if message is not None and message.GetOptions().map_entry:
            value = message.fields_by_name["value"]
            if value.message_type is None:
                if field.name.endswith("filenames"):
                    found.add(dotted)
                continue
            message = value.message_type
        if message is not None:
            if message.full_name not in seen:
                found |= _file_fields(message, f"{dotted}.", seen | {message.full_name})
        elif _names_files(field):
            found.add(dotted)
    return found


def test_every_file_naming_field_of_model_config_is_listed() -> None:
    fields = _file_fields(model_config_pb2.ModelConfig.DESCRIPTOR)
    assert "default_model_filename" in fields  # the walk finds them at all
    assert fields == set(FILE_FIELDS)


def test_config_file_names_yields_every_listed_field(tmp_path: Path) -> None:
    config = parse_config_text(EVERY_FIELD, "every")
    produced = [field for field, name, _ in config_file_names(config) if name == "NAME"]
    assert len(produced) == len(FILE_FIELDS)
    # ... and check_config_paths refuses each one when it climbs out.
    for index in range(len(FILE_FIELDS)):
        bad = parse_config_text(EVERY_FIELD.replace("NAME", "ok", index).replace("NAME", "../x", 1), "b")
        with pytest.raises(InvalidArgumentError, match=r"climbs out with '\.\.'"):
            check_config_paths(bad, ModelFiles("every", tmp_path), [1])
    check_config_paths(
        parse_config_text(EVERY_FIELD.replace("NAME", "ok"), "ok"), ModelFiles("e", tmp_path), [1]
    )


@pytest.fixture
def model(tmp_path: Path) -> ModelFiles:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s" * 123)
    folder = tmp_path / "repo" / "m"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text("")
    (folder / "1" / "inner.py").symlink_to(folder / "1" / "model.py")
    (folder / "1" / "out.py").symlink_to(outside / "secret")
    (folder / "1" / "dangling.py").symlink_to(outside / "missing")
    (folder / "1" / "dir").symlink_to(outside)
    return ModelFiles("m", folder, allow_links_outside=False)  # --refuse-model-links-outside


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "is empty"),
        ("a\x00b", "NUL"),
        ("/etc/passwd", "absolute"),
        ("../../outside/secret", "climbs out"),
        ("sub/../model.py", "climbs out"),  # even when it would stay inside: one rule, no resolution
        ("out.py", "symbolic link"),
        ("dangling.py", "symbolic link"),
        ("dir/secret", "symbolic link"),
    ],
)
def test_refusals_name_model_field_and_rule(model: ModelFiles, name: str, why: str) -> None:
    with pytest.raises(InvalidArgumentError, match=why) as info:
        model.path("default_model_filename", name, "1")
    message = str(info.value)
    assert "model 'm'" in message
    assert "default_model_filename" in message
    assert "123" not in message
    assert "outside/" not in message.replace(name, "")


def test_outside_and_missing_read_alike(model: ModelFiles) -> None:
    # An existing outside file and a missing one give the same answer (after the name itself).
    errors = []
    for name in ("out.py", "dangling.py"):
        with pytest.raises(InvalidArgumentError) as info:
            model.version_file(1, "f", name)
        errors.append(str(info.value).replace(name, "NAME"))
    assert errors[0] == errors[1]


def test_inside_names_resolve(model: ModelFiles) -> None:
    assert model.version_file(1, "f", "") == Path(os.path.realpath(model.folder / "1"))  # ensembles: no file
    assert model.version_file(1, "f", "model.py") == Path(os.path.realpath(model.folder / "1" / "model.py"))
    assert model.version_file(1, "f", "inner.py").name == "model.py"  # links resolved once
    assert model.version_file(1, "f", "missing.py").name == "missing.py"  # the backend says it is missing


def test_allow_links_outside_follows_links_but_never_names(model: ModelFiles) -> None:
    linked = ModelFiles(model.model, model.folder)  # the default, as Triton
    assert linked.version_file(1, "f", "out.py").name == "secret"
    assert linked.version_file(1, "f", "dir/secret").name == "secret"
    for name in ("/etc/passwd", "../../outside/secret"):
        with pytest.raises(InvalidArgumentError):
            linked.version_file(1, "f", name)


@pytest.mark.parametrize("allow_links_outside", [True, False])
def test_a_load_overrides_names_never_follow_links_out(model: ModelFiles, allow_links_outside: bool) -> None:
    caller = ModelFiles(model.model, model.folder, allow_links_outside, ConfigOrigin.LOAD_OVERRIDE)
    for name, why in (
        ("out.py", "symbolic link"),
        ("dir/secret", "symbolic link"),
        ("/etc/passwd", "absolute"),
    ):
        with pytest.raises(InvalidArgumentError, match=why) as info:
            caller.version_file(1, "f", name)
        assert "a load override may name only files inside its model's folder" in str(info.value)
        assert "--refuse-model-links-outside" not in str(info.value)  # no server option lifts it
    assert caller.version_file(1, "f", "inner.py").name == "model.py"  # links inside are fine


def test_a_model_folder_linked_in_is_its_own_inside(tmp_path: Path) -> None:
    real = tmp_path / "cvmfs" / "m"
    (real / "1").mkdir(parents=True)
    (real / "1" / "model.onnx").write_bytes(b"")
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "m").symlink_to(real)
    files = ModelFiles("m", tmp_path / "repo" / "m", allow_links_outside=True)
    assert files.version_file(1, "f", "model.onnx") == (real / "1" / "model.onnx").resolve()


# --- requested versions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1), ("0", 0), ("00001", 1), (" 7", 7), ("+3", 3), ("1_0", 1), ("9" * 18, int("9" * 18))],
)
def test_versions_read_as_triton_reads_them(text: str, value: int) -> None:
    assert parse_version(text) == value  # std::stol: blanks, sign, digits, the rest ignored


@pytest.mark.parametrize(
    "text", ["wrong_specification", "", "²", "\u0661", "1" * 100_000, "9" * 20, "-" + "9" * 30]
)
def test_non_numbers_are_invalid_argument_in_tritons_words(text: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_version(text)
    message = str(info.value)
    assert message.startswith("failed to get model version from specified version string '")
    assert message.endswith("(details: stol), version should be an integral value > 0")
    assert len(message) < 1000  # a huge version is cut, not echoed


def test_negative_versions_are_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_version("-1")
    assert str(info.value) == "invalid model version specified '-1' , version should be an integral value > 0"


# --- the source scan ----------------------------------------------------------------------------------

SERVER = Path(sonic.server.__file__).parent
FIELD_ATTRIBUTES = {name.rsplit(".", 1)[-1] for name in FILE_FIELDS}
CHOKE_POINT_CALLS = {"path", "version_file", "check_config_paths", "model_filename"}
# Functions that read a file-naming field only to return the name; their callers check it.
RETURNS_NAME_ONLY = {
    ("backends/base.py", "model_filename"),  # load_config passes it to ModelFiles.version_file
    ("backends/trees.py", "_choose_file"),  # through TreesBackend.model_filename, idem
}


def _bypasses() -> list[str]:
    found = []
    for path in sorted(SERVER.rglob("*.py")):
        relative = path.relative_to(SERVER).as_posix()
        if relative == "models/paths.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            nodes = list(ast.walk(function))
            reads = {n.attr for n in nodes if isinstance(n, ast.Attribute) and n.attr in FIELD_ATTRIBUTES}
            # Setting a field is not opening it: only loads of the attribute count.
            reads -= {
                n.attr
                for n in nodes
                if isinstance(n, ast.Attribute)
                and isinstance(n.ctx, ast.Store)
                and n.attr in FIELD_ATTRIBUTES
            }
            if not reads or (relative, function.name) in RETURNS_NAME_ONLY:
                continue
            calls = {
                n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                for n in nodes
                if isinstance(n, ast.Call)
            }
            if not calls & CHOKE_POINT_CALLS:
                found.append(f"{relative}:{function.lineno} {function.name} reads {sorted(reads)}")
    return found


def test_no_server_code_reads_a_file_field_past_the_choke_point() -> None:
    assert _bypasses() == []


def test_the_scan_sees_a_bypass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The scan can fail: the code this module replaced is flagged.
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / "old.py").write_text(
        "def load(context):\n    return open(context.version_dir / context.config.default_model_filename)\n"
    )
    monkeypatch.setattr(__name__ + ".SERVER", tmp_path)
    assert _bypasses() == ["backends/old.py:1 load reads ['default_model_filename']"]


def test_hls4ml_cache_dir_is_not_a_configurations_choice(tmp_path: Path) -> None:
    # A folder the server writes to and loads a library from: only --backend-config sets it.
    config = parse_config_text(
        'name: "h" backend: "hls4ml" input [{name: "x" data_type: TYPE_FP32 dims: [4]}] '
        'output [{name: "y" data_type: TYPE_FP32 dims: [2]}] '
        f'parameters {{ key: "cache_dir" value: {{ string_value: "{tmp_path}" }} }}',
        "h",
    )
    version_dir = tmp_path / "h" / "1"
    context = InstanceContext(
        config, validate_config(config), 1, version_dir, version_dir / "x", "h_0", "cpu", 0
    )
    with pytest.raises(ModelConfigError, match="--backend-config hls4ml,cache_dir=DIR"):
        Hls4mlBackend(context)
    assert list(tmp_path.iterdir()) == []  # nothing written there
