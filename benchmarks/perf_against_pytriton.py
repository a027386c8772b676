"""`sonic perf` against NVIDIA Triton: tritonserver 2.51 from nvidia-pytriton, an identity function.

    LD_LIBRARY_PATH=/root/.pyenv/versions/3.11.7/lib .venv/bin/python -m benchmarks.perf_against_pytriton

(pytriton's Python-backend stub links the system libpython; point it at the venv's own when they differ.)
pytriton restricts Triton's statistics protocol to its own token, so the report has client figures and
a note instead of the server breakdown.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import numpy.typing as npt
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

from benchmarks.harness.report import RESULTS

GRPC_PORT = 18001


@batch  # type: ignore[untyped-decorator]  # pytriton ships no type information
def identity(INPUT0: npt.NDArray[Any]) -> dict[str, npt.NDArray[Any]]:
    return {"OUTPUT0": INPUT0}


def main() -> None:
    config = TritonConfig(grpc_port=GRPC_PORT, http_port=GRPC_PORT - 1, metrics_port=GRPC_PORT + 1)
    with Triton(config=config) as triton:
        triton.bind(
            model_name="identity",
            infer_func=identity,
            inputs=[Tensor(name="INPUT0", dtype=np.float32, shape=(16,))],
            outputs=[Tensor(name="OUTPUT0", dtype=np.float32, shape=(16,))],
            config=ModelConfig(max_batch_size=64),
        )
        triton.run()
        command = [
            sys.executable, "-m", "sonic.cli.main", "perf", "-m", "identity", "-u", f"127.0.0.1:{GRPC_PORT}",
            "--concurrency", "1:4:x2", "-b", "4", "--measurement-interval-s", "1", "--max-windows", "4",
            "--json", str(RESULTS / "perf_triton_pytriton_identity.json"),
        ]  # fmt: skip
        subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
