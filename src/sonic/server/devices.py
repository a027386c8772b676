"""Accelerator discovery, done once at start-up (never at import)."""

from __future__ import annotations

import shutil
import subprocess


def detect_gpu_count() -> int:
    """NVIDIA GPUs usable by onnxruntime's CUDA provider: 0 without onnxruntime-gpu or a driver."""
    import onnxruntime  # noqa: PLC0415  (heavy import, only when serving)

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return 0
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))
