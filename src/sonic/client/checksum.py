"""SonicTriton's model version check: the server's checksums against the local model files.

A model's ``config.pbtxt`` may carry a ``checksum`` repository agent whose parameters map
``MD5:<path>`` (relative to the model's folder) to the file's MD5. Given the local copy of the model's
config, the client computes the MD5 of each named file next to it and compares, as CMSSW does when a
module names its local ``modelConfigPath``: a mismatch means the server runs another version of the
model than the one the job was validated with.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from sonic.client.errors import ModelVersionError

PREFIX = "MD5:"


def file_md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(model: str, server: str, checksums: Mapping[str, str], local_config: Path) -> int:
    """Compare each ``MD5:<path>`` of the server with the file next to ``local_config``; returns how
    many were checked. Raises :class:`ModelVersionError` naming the first file that differs or is missing."""
    folder = local_config.parent
    checked = 0
    for key, expected in sorted(checksums.items()):
        if not key.startswith(PREFIX):
            continue  # other algorithms: not checked, as in CMSSW
        path = folder / key.removeprefix(PREFIX)
        try:
            actual = file_md5(path)
        except OSError as exc:
            msg = f"model '{model}': {path} (checked against {server}'s checksum) cannot be read: {exc}"
            raise ModelVersionError(msg) from None
        if actual != expected.lower():
            msg = (
                f"model '{model}': checksum {actual} of {path} does not match checksum {expected} "
                f"from server {server}: the server runs another version of the model"
            )
            raise ModelVersionError(msg)
        checked += 1
    return checked
