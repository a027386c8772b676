"""The configuration a model loads with: its ``config.pbtxt``, or a model-control override, completed.

RepositoryModelLoad's ``config`` parameter REPLACES the whole configuration, as in Triton 2.51: the
repository's ``config.pbtxt`` is not read, fields the override leaves out take their defaults, and
auto-completion runs on the override as it would on a file (``{"max_batch_size": 16}`` on a Python
model loads with the inputs and outputs its ``auto_complete_config`` gives, or none). An override that
does not parse, or names another model, is answered in Triton's words ("failed to load '<name>',
failed to poll from model repository"), followed by what is wrong.

Every file the configuration names is checked by :mod:`sonic.server.models.paths` before any backend code
runs (auto-completion of a Python model imports its file), and again after completion. The names an
override gives are the caller's: they must resolve inside the model's folder, links included, whether
or not the server follows the links its repository holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InvalidArgumentError, ModelConfigError, SonicError, quote
from sonic.protocol.model_config import (
    CONFIG_FILENAME,
    ModelSpec,
    backend_name,
    fill_defaults,
    load_config_file,
    parse_config_json,
    validate_config,
)
from sonic.server import backends
from sonic.server.classification.top_k import Labels, read_labels
from sonic.server.models.paths import ConfigOrigin, ModelFiles, check_config_paths
from sonic.server.models.repository import ModelLocation, available_versions, select_versions

POLL_FAILED = "failed to poll from model repository"  # Triton's words for a load refused before loading


def parse_override(name: str, text: object) -> model_config_pb2.ModelConfig:
    """RepositoryModelLoad's ``config`` parameter: the JSON of a whole ModelConfig."""
    where = f"failed to load {quote(name)}, {POLL_FAILED}"
    if not isinstance(text, str):
        raise InvalidArgumentError(
            f"{where}: parameter 'config' must be a JSON string, got {type(text).__name__}"
        )
    try:
        return parse_config_json(text, "invalid config override")
    except ModelConfigError as exc:
        raise InvalidArgumentError(f"{where}: {exc}") from None


class VersionsFailedError(Exception):
    """The backend's own code refused the model while completing its configuration (a Python model
    that fails at import): a failure of the ``versions`` about to load, as Triton reports it (each
    version UNAVAILABLE with the reason), not of the configuration. ``error`` is what to answer."""

    def __init__(self, error: SonicError, versions: list[int]) -> None:
        super().__init__(str(error))
        self.error = error
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
) -> PreparedConfig:
    """Read (or take the override), check paths, auto-complete and validate (blocking: runs in a thread)."""
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
    selected = select_versions(config.version_policy, versions)
    if override is not None:  # the caller's names: never through a link out, whatever the server's rule
        caller = ModelFiles(location.name, location.path, origin=ConfigOrigin.LOAD_OVERRIDE)
        check_config_paths(config, caller, selected)
    check_config_paths(config, files, selected)  # before any backend code reads or imports a file
    if auto_complete:
        latest = selected[-1]
        filename = backend_cls.model_filename(config, location.path / str(latest))
        model_path = files.version_file(latest, "default_model_filename", filename)
        try:
            backend_cls.auto_complete_config(config, model_path)
        except SonicError as exc:
            raise VersionsFailedError(exc, selected) from exc
    fill_defaults(config, default_filename=backend_cls.default_filename, gpu_count=gpu_count)
    check_config_paths(config, files, selected)  # what auto-completion added
    spec = validate_config(config)
    return PreparedConfig(config, spec, backend_cls, selected, files, read_labels(config, files))
