"""hls4ml models made ready to run: converted, compiled with g++ once, cached by content hash.

Two sources in a model's version folder:

- ``hls4ml_prj/``: an hls4ml project as hls4ml writes it (``build_lib.sh``, ``firmware/``,
  ``<project>_bridge.cpp``); its bridge library is built with the project's own ``build_lib.sh``.
- ``model.pt``: a PyTorch ``nn.Module`` saved whole with ``torch.save`` (a pickle: serve trusted
  repositories only), converted with ``hls4ml.converters.convert_from_pytorch_model`` and the
  config's conversion parameters (:class:`Conversion`), then compiled.

Either way the result is a :class:`~sonic.server.backends.fpga.Bridge` in
``CACHE/<hash>/`` (hash of the source bytes, the conversion parameters and hls4ml's version), where
the next load, by any instance or server, finds it without converting or compiling again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from sonic.protocol.errors import ModelConfigError
from sonic.server.backends.fpga import Bridge

PROJECT_DIR = "hls4ml_prj"
TORCH_FILE = "model.pt"
_CONVERT = re.compile(r"convert_data<(\w+),\s*(\w+),\s*(\d+)>")


@dataclass(frozen=True)
class Conversion:
    """How a source model becomes firmware (hls4ml's names); from config ``parameters``."""

    precision: str = "ap_fixed<16,6>"  # every layer's weights, biases and results
    reuse_factor: int = 1
    strategy: str = "Latency"
    io_type: str = "io_parallel"


def _digest(paths: list[Path], extra: str) -> str:
    digest = hashlib.sha256(extra.encode())
    for path in sorted(paths):
        digest.update(str(path.name).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def _source_files(source: Path) -> list[Path]:
    if source.is_dir():
        return [p for p in source.rglob("*") if p.is_file() and p.suffix not in {".so", ".o"}]
    return [source]


def find_source(version_dir: Path) -> Path:
    for name in (PROJECT_DIR, TORCH_FILE):
        if (version_dir / name).exists():
            return version_dir / name
    raise ModelConfigError(
        f"hls4ml model in {version_dir}: expected an hls4ml project folder '{PROJECT_DIR}/' or a PyTorch "
        f"module '{TORCH_FILE}' (torch.save of the whole module)"
    )


def build(source: Path, conversion: Conversion, input_dims: tuple[int, ...], cache_root: Path) -> Bridge:
    """The compiled bridge for ``source``, from the cache or built now (one builder at a time per hash)."""
    import hls4ml  # noqa: PLC0415  (the optional extra)

    key = _digest(_source_files(source), json.dumps([asdict(conversion), input_dims, hls4ml.__version__]))
    folder = cache_root / key
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        # Instances of one model load in parallel threads, servers in parallel processes: one builds.
        fcntl.flock(lock, fcntl.LOCK_EX)
        meta = folder / "bridge.json"
        if not meta.is_file():
            project = folder / "project"
            shutil.rmtree(project, ignore_errors=True)
            if source.is_dir():
                shutil.copytree(source, project)
            else:
                _convert_torch(source, conversion, input_dims, project)
            library, function, input_size, output_sizes = _compile(project, reuse=source.is_dir())
            shutil.copy2(library, folder / "library.so")
            meta.write_text(json.dumps({"top_function": function, "input_size": input_size,
                                        "output_sizes": output_sizes}))  # fmt: skip
    data = json.loads(meta.read_text())
    return Bridge(
        folder / "library.so", data["top_function"], data["input_size"], tuple(data["output_sizes"])
    )


def _convert_torch(source: Path, conversion: Conversion, input_dims: tuple[int, ...], project: Path) -> None:
    import hls4ml  # noqa: PLC0415
    import torch  # noqa: PLC0415

    module = torch.load(source, weights_only=False).eval()  # a whole module: a pickle (trusted repositories)
    config = hls4ml.utils.config_from_pytorch_model(
        module,
        input_shape=input_dims,
        granularity="model",
        default_precision=conversion.precision,
        default_reuse_factor=conversion.reuse_factor,
    )
    config["Model"]["Strategy"] = conversion.strategy
    graph = hls4ml.converters.convert_from_pytorch_model(
        module, hls_config=config, output_dir=str(project), backend="Vivado", io_type=conversion.io_type
    )
    graph.write()


def _compile(project: Path, *, reuse: bool) -> tuple[Path, str, int, list[int]]:
    """Runs the project's build_lib.sh (g++); the library, top function and tensor sizes of its bridge.

    With ``reuse``, a library the project already holds (hls4ml's ``compile()`` wrote it) is used as is.
    """
    script = project / "build_lib.sh"
    names = re.findall(r"^PROJECT=(\w+)", script.read_text(), flags=re.MULTILINE) if script.is_file() else []
    if not names:
        raise ModelConfigError(f"{project}: not an hls4ml project (no build_lib.sh with PROJECT=)")
    name = names[0]
    libraries = sorted((project / "firmware").glob(f"{name}-*.so"))
    if not (reuse and len(libraries) == 1):
        for old in libraries:
            old.unlink()
        bash = shutil.which("bash") or "/bin/bash"
        done = subprocess.run([bash, str(script)], cwd=project, capture_output=True, text=True, check=False)
        libraries = sorted((project / "firmware").glob(f"{name}-*.so"))
        if done.returncode != 0 or not libraries:
            raise ModelConfigError(
                f"{project}: build_lib.sh failed ({done.returncode}): {done.stderr[-2000:]}"
            )
    bridge = (project / f"{name}_bridge.cpp").read_text()
    body = bridge[bridge.index(f"void {name}_float(") : bridge.index(f"void {name}_double(")]
    inputs = [int(n) for src, _, n in _CONVERT.findall(body) if src == "float"]
    outputs = [int(n) for _, dst, n in _CONVERT.findall(body) if dst == "float"]
    if len(inputs) != 1 or not outputs:
        raise ModelConfigError(f"{project}: one input expected, the bridge converts {len(inputs)}")
    return libraries[-1], f"{name}_float", inputs[0], outputs
