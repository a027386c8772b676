"""Model repositories in Triton's layout: ``<repo>/<model>/config.pbtxt`` and ``<repo>/<model>/<version>/``."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InternalError, InvalidArgumentError, ModelConfigError, NotFoundError, quote

# std::stol's grammar, which Triton parses a requested version with: blanks, a sign, digits, anything.
_STOL = re.compile(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)")
_INT64_MAX = 2**63 - 1

# Model names become directory names: keep them to one plain path component.
_VALID_MODEL_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def check_model_name(name: str) -> None:
    if not _VALID_MODEL_NAME.match(name) or name in {".", ".."}:
        raise InvalidArgumentError(
            f"invalid model name {quote(name)}: use letters, digits, '_', '-' and '.', one path component"
        )


def parse_version(text: str) -> int:
    """A requested model version (gRPC ``model_version``), as Triton 2.51 reads it, in its words.

    INVALID_ARGUMENT for what is not a number or is negative; the digits are bounded before conversion
    (Python's int() refuses over 4300 digits with an error that is not the client's).
    """
    match = _STOL.match(text)
    digits = match.group(2).lstrip("0") if match else ""
    if match is None or len(digits) > 19 or int(digits or "0") > _INT64_MAX + (match.group(1) == "-"):
        raise InvalidArgumentError(
            f"failed to get model version from specified version string {quote(text)} (details: stol), "
            "version should be an integral value > 0"
        )
    value = int(match.group(1) + (digits or "0"))
    if value < 0:
        raise InvalidArgumentError(
            f"invalid model version specified {quote(text)} , version should be an integral value > 0"
        )
    return value


class StartFailure(InternalError):
    """What stops a server's start: Triton's words (``error: creating server: <status> - <message>``, exit
    status 1), then ours in ``detail``: which repository or model, and why."""

    def __init__(self, message: str, detail: str = "", triton_status: str = "Internal") -> None:
        super().__init__(f"{message}: {detail}" if detail else message)
        self.triton_message = message
        self.triton_status = triton_status
        self.detail = detail

    def triton_line(self) -> str:
        return f"error: creating server: {self.triton_status} - {self.triton_message}"


# Triton's cloud repositories (S3, Google Cloud Storage, Azure), as a --model-repository Path spells them.
CLOUD_STORAGE = re.compile(r"(s3|gs|as):/")


def check_repository_roots(roots: tuple[Path, ...]) -> None:
    """Each ``--model-repository`` must be a folder the server can list, as Triton checks at start
    (a typo would otherwise serve nothing from it, silently). Paths as given, as Triton prints them."""
    for root in roots:
        where = f"--model-repository {root}"
        if CLOUD_STORAGE.match(str(root)):  # Path has made "s3://b" "s3:/b": a missing folder would hide why
            raise StartFailure(
                f"failed to stat file {root}",
                f"{where}: cloud storage (s3://, gs://, as://) is not supported: sonic serves model "
                "repositories in local folders (copy or mount it)",
            )
        try:
            info = root.stat()
        except OSError as exc:
            raise StartFailure(f"failed to stat file {root}", f"{where}: {exc.strerror}") from None
        if not stat.S_ISDIR(info.st_mode):
            msg = "repository path is not a valid directory"
            raise StartFailure(msg, f"{where} is not a folder", "Invalid argument")
        try:
            with os.scandir(root) as entries:
                next(entries, None)
        except OSError as exc:
            raise StartFailure(f"failed to open directory {root}", f"{where}: {exc.strerror}") from None


@dataclass(frozen=True)
class ModelLocation:
    name: str
    path: Path


class Repository:
    """The union of one or more repository folders."""

    def __init__(self, roots: tuple[Path, ...], *, allow_links_outside: bool = True) -> None:
        self.roots = tuple(root.resolve() for root in roots)
        self.allow_links_outside = allow_links_outside  # e.g. model folders linked in from CVMFS

    def scan(self) -> tuple[dict[str, ModelLocation], dict[str, str]]:
        """Models found, and names that cannot be used with the reason (e.g. in two repositories)."""
        found: dict[str, ModelLocation] = {}
        conflicts: dict[str, str] = {}
        for root in self.roots:
            if not root.is_dir():
                continue
            for child in sorted(root.iterdir()):
                if (
                    not child.is_dir()
                    or child.name.startswith(".")
                    or not _VALID_MODEL_NAME.match(child.name)
                ):
                    continue
                if child.name in found:
                    conflicts[child.name] = (
                        f"model '{child.name}' appears in more than one repository: "
                        f"{found[child.name].path.parent} and {root}"
                    )
                    continue
                found[child.name] = ModelLocation(child.name, child)
        for name in conflicts:
            found.pop(name, None)
        return found, conflicts

    def locate(self, name: str) -> ModelLocation:
        check_model_name(name)
        found, conflicts = self.scan()
        if name in conflicts:
            raise ModelConfigError(conflicts[name])
        if name not in found:
            raise NotFoundError(
                f"failed to load {quote(name)}: no model folder {quote(name)} in the model repositories "
                f"{[str(r) for r in self.roots]}"
            )
        location = found[name]
        # A model folder linked in from elsewhere loads, as in Triton, unless the server was told not to.
        resolved = location.path.resolve()
        if not self.allow_links_outside and not any(resolved.is_relative_to(root) for root in self.roots):
            raise InvalidArgumentError(
                f"model {quote(name)} resolves to {resolved}, outside the model repositories "
                f"{[str(r) for r in self.roots]}; refusing to load it (the server was started with "
                "--refuse-model-links-outside)"
            )
        return location


def available_versions(model_dir: Path) -> list[int]:
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())


def select_versions(name: str, policy: model_config_pb2.ModelVersionPolicy, versions: list[int]) -> list[int]:
    """Apply a version policy (latest N, all, specific) to the version folders present."""
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return list(versions)
    if which == "specific":
        wanted = set(policy.specific.versions)
        missing = sorted(wanted - set(versions))
        if missing:
            raise ModelConfigError(  # Triton's words, then which versions
                f"load failed for model {quote(name)}: at least one version must be available under the "
                f"version policy of model {quote(name)} (it asks for version(s) {missing}, which have no folder)"
            )
        return sorted(wanted)
    count = policy.latest.num_versions if which == "latest" else 1
    return versions[-max(1, count) :]


def fingerprint(model_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """Names, sizes and modification times of a model's files: what polling compares."""
    entries = []
    for path in sorted(model_dir.rglob("*")):
        if path.is_file():
            stat = path.stat()
            entries.append((str(path.relative_to(model_dir)), stat.st_size, stat.st_mtime_ns))
    return tuple(entries)
