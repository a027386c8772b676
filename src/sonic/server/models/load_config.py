"""The configuration a model loads with: its ``config.pbtxt``, or a model-control override, completed.

RepositoryModelLoad's ``config`` parameter REPLACES the whole configuration, as in Triton 2.51: the
repository's ``config.pbtxt`` is not read, fields the override leaves out take their defaults, and
auto-completion runs on the override as it would on a file (``{"max_batch_size": 16}`` on a Python
model loads with the inputs and outputs its ``auto_complete_config`` gives, or none). An override that
does not parse, or names another model, is answered in Triton's words ("failed to load '<name>',
failed to poll from model repository"), followed by what is wrong.

The repository agents the configuration asks for (:mod:`sonic.server.models.repo_agents`: checksums) run
first, at every load. Every file the configuration names is checked by :mod:`sonic.server.models.paths` before any backend code
runs (auto-completion of a Python model imports its file), and again after completion. The names an
override gives are the caller's: they must resolve inside the model's folder, links included, whether
or not the server follows the links its repository holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import GrpcCode, InvalidArgumentError, ModelConfigError, SonicError, quote
from sonic.protocol.model_config import (
    CONFIG_FILENAME,
    ModelCodeError,
    ModelSpec,
    VersionConfigError,
    backend_name,
    fill_defaults,
    load_config_file,
    parse_config_json,
    validate_config,
)
from sonic.server import backends
from sonic.server.classification.top_k import Labels, read_labels
from sonic.server.config import BackendOptions
from sonic.server.models.paths import ConfigOrigin, ModelFiles, check_config_paths
from sonic.server.models.repo_agents import run_repo_agents
from sonic.server.models.repository import ModelLocation, available_versions, select_versions
from sonic.server.runtime.sequences import check_controls

POLL_FAILED = "failed to poll from model repository"  # Triton's words for a load refused before loading


def parse_override(name: str, text: object) -> model_config_pb2.ModelConfig:
    """RepositoryModelLoad's ``config`` parameter: the JSON of a whole ModelConfig."""
    if not isinstance(text, str):  # Triton's words (its gRPC front end's), then what came
        raise InvalidArgumentError(
            f"invalid value type for load parameter 'config', expected string_param. Got "
            f"{type(text).__name__} for the load of {quote(name)}: the configuration is a JSON string"
        )
    where = f"failed to load {quote(name)}, {POLL_FAILED}"
    try:
        return parse_config_json(text, "invalid config override")
    except ModelConfigError as exc:
        raise InvalidArgumentError(f"{where}: {exc}") from None


# Triton's words for a status, as they lead a version's reason for not loading (Status::AsString).
STATUS_WORDS = {
    GrpcCode.INVALID_ARGUMENT: "Invalid argument",
    GrpcCode.NOT_FOUND: "Not found",
    GrpcCode.ALREADY_EXISTS: "Already exists",
    GrpcCode.UNIMPLEMENTED: "Unsupported",
    GrpcCode.UNAVAILABLE: "Unavailable",
}


def failure_reason(exc: SonicError) -> str:
    """A version's reason for not loading, led by Triton's words for its status: a configuration or a
    model file the backend refuses is ``Invalid argument``, a failure of the model's own code
    ``Internal``."""
    words = "Internal" if isinstance(exc, ModelCodeError) else STATUS_WORDS.get(exc.code, "Internal")
    return f"{words}: {exc}"


def versions_failed(name: str, reasons: dict[int, str]) -> ModelConfigError:
    """Triton's answer to a load none of whose versions loaded: each version's state and reason."""
    listed = "".join(f"version {v} is at UNAVAILABLE state: {r};\n" for v, r in sorted(reasons.items()))
    return ModelConfigError(f"load failed for model {quote(name)}: {listed}")


class VersionsFailedError(Exception):
    """The versions about to load are refused before any is created (a Python model that fails at
    import or in ``auto_complete_config``, a configuration Triton checks per version): as Triton reports
    it, each version UNAVAILABLE with its reason (``reasons``), not a failure of the configuration.
    ``error`` is what to answer."""

    def __init__(self, name: str, versions: list[int], cause: SonicError) -> None:
        self.reasons = dict.fromkeys(versions, failure_reason(cause))
        self.error = versions_failed(name, self.reasons)
        super().__init__(str(self.error))
        self.versions = versions


@dataclass(frozen=True)
class PreparedConfig:
    config: model_config_pb2.ModelConfig
    spec: ModelSpec
    backend_cls: type[backends.Backend]
    versions: list[int]  # the version folders the policy selects
    files: ModelFiles
    labels: Labels  # the lines of each output's label_filename (classification)


def prepare_config(
    location: ModelLocation,
    override: model_config_pb2.ModelConfig | None,
    gpu_count: int,
    *,
    auto_complete: bool = True,
    allow_links_outside: bool = True,
    backend_options: BackendOptions | None = None,
) -> PreparedConfig:
    """Read (or take the override), check paths, auto-complete and validate (blocking: runs in a thread).

    A configuration refused before any version is looked at is answered as Triton refuses it while it
    polls the repository: ``failed to load '<name>', failed to poll from model repository``, then what
    is wrong. ``backend_options``: ``--backend-config``, which auto-completion reads (none: Triton's defaults)."""
    options = backend_options or BackendOptions()
    with _poll_failures(location.name):
        return _prepared(location, override, gpu_count, auto_complete, allow_links_outside, options)


@contextlib.contextmanager
def _poll_failures(name: str) -> Iterator[None]:
    try:
        yield
    except ModelConfigError as exc:
        if str(exc).startswith(("load failed for model ", "failed to load ")):
            raise
        raise ModelConfigError(f"failed to load {quote(name)}, {POLL_FAILED}: {exc}") from None


def _prepared(
    location: ModelLocation,
    override: model_config_pb2.ModelConfig | None,
    gpu_count: int,
    auto_complete: bool,
    allow_links_outside: bool,
    backend_options: BackendOptions,
) -> PreparedConfig:
    config_path = location.path / CONFIG_FILENAME
    if override is not None:
        config = model_config_pb2.ModelConfig()
        config.CopyFrom(override)
        if config.name and config.name != location.name:
            raise InvalidArgumentError(
                f"failed to load {quote(location.name)}, {POLL_FAILED}: unexpected directory name "
                f"{quote(location.name)} for model {quote(config.name)}, directory name must equal model name"
            )
    elif config_path.is_file():
        config = load_config_file(config_path)
    else:
        config = model_config_pb2.ModelConfig()
    if config.name and config.name != location.name:
        raise ModelConfigError(
            f"{config_path}: model name '{config.name}' does not match its folder '{location.name}'"
        )
    config.name = location.name
    files = ModelFiles(location.name, location.path, allow_links_outside)
    # As Triton: the agents run on the configuration as read (or sent), before anything else reads a file.
    caller = ModelFiles(location.name, location.path, origin=ConfigOrigin.LOAD_OVERRIDE)
    run_repo_agents(config, caller if override is not None else files)
    versions = available_versions(location.path)
    if not versions:
        raise ModelConfigError(  # Triton's words, then where sonic looked
            f"load failed for model {quote(location.name)}: at least one version must be available under the "
            f"version policy of model {quote(location.name)} (no numeric version folder in {location.path})"
        )
    name = backend_name(config)
    if not name:
        filenames = {p.name for v in versions for p in (location.path / str(v)).iterdir()}
        detected = backends.detect_backend(filenames)
        if detected is None:
            raise ModelConfigError(
                f"model '{location.name}': the config names no backend or platform and no known model "
                f"file was found in {location.path}"
            )
        name = detected
    if not config.backend and not config.platform:
        config.backend = name
    backend_cls = backends.backend_class(name)
    selected = select_versions(location.name, config.version_policy, versions)
    if override is not None:  # the caller's names: never through a link out, whatever the server's rule
        check_config_paths(config, caller, selected)
    check_config_paths(config, files, selected)  # before any backend code reads or imports a file
    if auto_complete:
        latest = selected[-1]
        filename = backend_cls.model_filename(config, location.path / str(latest))
        model_path = files.version_file(latest, "default_model_filename", filename)
        try:
            backend_cls.complete_config(config, model_path, backend_options.for_backend(backend_cls.name))
        except SonicError as exc:
            raise VersionsFailedError(location.name, selected, exc) from exc
    try:
        fill_defaults(config, default_filename=backend_cls.default_filename, gpu_count=gpu_count)
        check_config_paths(config, files, selected)  # what auto-completion added
        spec = validate_config(config)
    except VersionConfigError as exc:
        raise VersionsFailedError(location.name, selected, exc) from exc
    check_controls(config)
    return PreparedConfig(config, spec, backend_cls, selected, files, read_labels(config, files))
