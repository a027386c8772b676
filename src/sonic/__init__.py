"""SONIC: Services for Optimized Network Inference on Coprocessors, in Python.

A KServe v2 / NVIDIA Triton compatible inference server (``sonic serve``), and the pieces around it.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sonic-inference")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0"

__all__ = ["__version__"]
