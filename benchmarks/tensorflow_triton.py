"""The DeepMET-like TensorFlow graph served by real Triton 2.51 and by ``sonic serve``, against direct.

The reference for ``benchmarks/tensorflow_deepmet.py``: what Triton reaches on the same cores with the
same load. The Triton here (nvidia-pytriton's ``tritonserver``) has only the Python backend, so its
model runs the same GraphDef through one TensorFlow session per instance (callables from
``CallableOptions``, as sonic's TensorFlow backend does) and merges the requests of each batch, as
Triton's own TensorFlow backend would; ``dynamic_batching { }`` and two CPU instances on both servers
(sonic's default for a TensorFlow CPU group, Triton's too). Each round runs, back to back: the
direct window (``--concurrency`` threads on one session in this process), then the same closed-loop
load (``benchmarks.harness.load.grpc_load``, pre-encoded requests, one event each) against each server.

Usage: ``./dev bench tensorflow_triton [--seconds 5] [--concurrency 8] [--repeats 3]``.
Writes ``benchmarks/results/tensorflow_triton.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

from benchmarks.harness.load import infer_request_bytes, load_with_cpu
from benchmarks.harness.processes import own_libpython_for_triton, site_paths
from benchmarks.harness.report import machine, save
from benchmarks.tensorflow_deepmet import direct_backend, direct_window
from sonic.launch import ServerProcess
from sonic.launch.triton import TritonProcess
from sonic.models import deepmet

TEMPLATE = Path(__file__).resolve().parent / "templates" / "tensorflow_triton_model.py"


def triton_repository(sonic_repo: Path, root: Path) -> Path:
    """A Triton repository beside ``sonic_repo``: the same config, the Python backend, two instances."""
    model = root / "deepmet"
    (model / "1").mkdir(parents=True)
    graphdef = sonic_repo / "deepmet" / "1" / "model.graphdef"
    shutil.copyfile(TEMPLATE, model / "1" / "model.py")
    settings = {"graphdef": str(graphdef), "paths": site_paths()}
    (model / "1" / "tensorflow_settings.json").write_text(json.dumps(settings, indent=2))
    config = (sonic_repo / "deepmet" / "config.pbtxt").read_text()
    config = config.replace('platform: "tensorflow_graphdef"', 'backend: "python"')
    (model / "config.pbtxt").write_text(config + "instance_group [ { count: 2 kind: KIND_CPU } ]\n")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    own_libpython_for_triton()
    event = deepmet.example_inputs(1, seed=5)
    payload = infer_request_bytes("deepmet", event, dict.fromkeys(event, "FP32"))
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="sonic-bench-tf-triton-") as tmp:
        sonic_repo = Path(tmp) / "sonic"
        deepmet.write_repository(sonic_repo)
        triton_repo = triton_repository(sonic_repo, Path(tmp) / "triton")
        backend = direct_backend(sonic_repo)

        with (
            ServerProcess.start([sonic_repo]) as sonic,
            TritonProcess.start([triton_repo], models=["deepmet"], workdir=Path(tmp) / "work") as triton,
        ):
            for _ in range(args.repeats):
                direct, direct_cpu_us = direct_window(backend, event, args.concurrency, args.seconds)
                row = {"direct_per_s": direct, "direct_cpu_us_per_event": direct_cpu_us}
                for name, server in (("sonic", sonic), ("triton", triton)):
                    load = load_with_cpu(
                        server.grpc_address,
                        payload,
                        server.pid,
                        concurrency=args.concurrency,
                        window_s=args.seconds,
                        transport="h2",
                    )
                    row[f"{name}_per_s"] = load.result.inferences_per_s
                    row[f"{name}_ratio"] = load.result.inferences_per_s / direct
                    # Triton's pid is the server's alone: its Python-backend stubs (where the model
                    # runs) are other processes, so only sonic's server CPU is complete; not compared.
                    row[f"{name}_server_cpu_us_per_event"] = load.server_cpu_us_per_request
                rounds.append(row)
                print(_row(row), flush=True)
        backend.close()
    medians = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print("median " + _row(medians))
    save("tensorflow_triton", {**vars(args), "medians": medians, "rounds": rounds, **machine()})


def _row(r: dict[str, float]) -> str:
    return (
        f"| direct {r['direct_per_s']:.0f} ev/s ({r['direct_cpu_us_per_event']:.0f} µs CPU/ev) "
        f"| sonic {r['sonic_per_s']:.0f} ev/s, served/direct {r['sonic_ratio']:.2f} "
        f"| Triton 2.51 {r['triton_per_s']:.0f} ev/s, served/direct {r['triton_ratio']:.2f} |"
    )


if __name__ == "__main__":
    main()
