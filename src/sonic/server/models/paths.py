"""The one place where a path named by a model configuration becomes a file to open.

A configuration names files (``default_model_filename``, ``cc_model_filenames``, op libraries, warm-up
data, initial sequence states, label files) and a model-control caller can send a whole configuration
with RepositoryModelLoad. Each name goes through :meth:`ModelFiles.path`, which keeps it inside the
model's own folder:

- lexical checks first, before the file system is touched: not empty, no NUL, not absolute, no ``..``
  component, so a refusal tells nothing about the file the name points at;
- then the name is resolved (symbolic links followed) and must stay inside the model's resolved folder,
  unless the configuration is the repository's own and the server follows links (its default, as
  Triton: ``SecurityConfig.allow_model_links_outside``; ``--refuse-model-links-outside`` turns it off):
  links placed in the repository by its author may lead elsewhere (e.g. CVMFS). A name given by a
  caller, in a RepositoryModelLoad ``config`` override (:attr:`ConfigOrigin.LOAD_OVERRIDE`), never can,
  links included: the caller may only name what the author put in the model's folder.

A refusal is :class:`~sonic.protocol.errors.InvalidArgumentError` naming the model, the field, the name
and the rule; it is the same whether the outside file exists or not, and gives no size or target.
:func:`check_config_paths` checks every file field of a configuration at load, before any backend
runs (Python backends import their file during auto-completion); backends open files only through
paths this module returned (``tests/unit/test_config_paths.py`` scans them).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InvalidArgumentError, quote

# Where each kind of name is looked up, relative to the model's folder ("<version>": each version folder).
VERSION_DIR = "<version>"
WARMUP_DIR = "warmup"
INITIAL_STATE_DIR = "initial_state"

# Every field of ModelConfig that names a file, with the folder its names are relative to. A test walks
# the protobuf descriptor and fails when a new file-naming field is not listed here.
FILE_FIELDS: dict[str, str] = {
    "default_model_filename": VERSION_DIR,
    "cc_model_filenames": VERSION_DIR,
    "model_operations.op_library_filename": "",
    "model_warmup.inputs.input_data_file": WARMUP_DIR,
    "sequence_batching.state.initial_state.data_file": INITIAL_STATE_DIR,
    "output.label_filename": "",
}


class ConfigOrigin(enum.Enum):
    """Who wrote the names checked: the repository's author (trusted with links) or a caller."""

    REPOSITORY = "repository"  # config.pbtxt, auto-completion, defaults
    LOAD_OVERRIDE = "load override"  # RepositoryModelLoad's ``config`` parameter


@dataclass(frozen=True)
class ModelFiles:
    """A model's folder and the rule for the files its configuration names."""

    model: str
    folder: Path  # the model's folder as found in the repository (it may itself be a permitted link)
    allow_links_outside: bool = True  # for the repository's names; see the module's docstring
    origin: ConfigOrigin = ConfigOrigin.REPOSITORY

    def path(self, field: str, name: str, under: str = "") -> Path:
        """The resolved path of ``name`` (from config ``field``), relative to ``folder / under``.

        Raises InvalidArgumentError when the name is not a plain relative name or leads outside.
        """
        override = self.origin is ConfigOrigin.LOAD_OVERRIDE
        where = f"model {quote(self.model)}: {field} {quote(name)}"
        rule = f"a {self.origin.value if override else 'configuration'} may name only files inside its model's folder"
        if not name:
            raise InvalidArgumentError(f"model {quote(self.model)}: {field} is empty; {rule}")
        if "\x00" in name:
            raise InvalidArgumentError(f"{where} holds a NUL character; {rule}")
        pure = PurePosixPath(name)
        if pure.is_absolute() or Path(name).is_absolute():
            raise InvalidArgumentError(f"{where} is an absolute path; {rule}")
        if ".." in pure.parts:
            raise InvalidArgumentError(f"{where} climbs out with '..'; {rule}")
        base = self.folder / under if under else self.folder
        resolved = Path(os.path.realpath(base / name))
        follow = self.allow_links_outside and not override
        if not follow and not resolved.is_relative_to(os.path.realpath(self.folder)):
            # No target, size or existence in the message: the caller may not learn about the outside.
            why = "" if override else " (the server was started with --refuse-model-links-outside)"
            raise InvalidArgumentError(
                f"{where} leads outside the model's folder through a symbolic link; {rule}{why}"
            )
        return resolved

    def version_file(self, version: int, field: str, name: str) -> Path:
        """``name`` in a version folder; an empty name (an ensemble has no model file) is the folder."""
        return self.path(field, name or ".", str(version))


def config_file_names(config: model_config_pb2.ModelConfig) -> Iterator[tuple[str, str, str]]:
    """(field, name, folder relative to the model's) for each file the configuration names."""
    if config.default_model_filename:
        yield "default_model_filename", config.default_model_filename, VERSION_DIR
    for key, name in sorted(config.cc_model_filenames.items()):
        yield f"cc_model_filenames[{key}]", name, VERSION_DIR
    for name in config.model_operations.op_library_filename:
        yield "model_operations.op_library_filename", name, ""
    for warmup in config.model_warmup:
        for input_name, entry in sorted(warmup.inputs.items()):
            if entry.WhichOneof("input_data_type") == "input_data_file":
                field = f"model_warmup '{warmup.name}' input '{input_name}' input_data_file"
                yield field, entry.input_data_file, WARMUP_DIR
    for state in config.sequence_batching.state:
        for initial in state.initial_state:
            if initial.WhichOneof("state_data") == "data_file":
                field = f"sequence_batching state '{state.input_name}' initial_state data_file"
                yield field, initial.data_file, INITIAL_STATE_DIR
    for output in config.output:
        if output.label_filename:
            yield f"output '{output.name}' label_filename", output.label_filename, ""


def check_config_paths(config: model_config_pb2.ModelConfig, files: ModelFiles, versions: list[int]) -> None:
    """Refuse the configuration if any file it names leads outside (for each of ``versions``)."""
    for field, name, under in config_file_names(config):
        if under == VERSION_DIR:
            for version in versions:
                files.version_file(version, field, name)
        else:
            files.path(field, name, under)
