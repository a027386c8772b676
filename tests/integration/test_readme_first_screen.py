"""README.md's "Serve your own model in five steps", run as written: a PyTorch MLP exported to ONNX (no
config.pbtxt) and TorchScript, ``sonic serve`` over them, tritonclient, sonic.client and curl calls, ``sonic
perf``. The blocks are read from the README itself, so the test follows the text.

What differs from a reader's shell: the ports (0, a free one, for 8001 and 8000: the addresses the ready
line gives replace ``localhost:8001``/``localhost:8000`` in the later blocks), ``sonic perf``'s windows (short
ones appended: the figures are not the point here), and ``pip install`` (no network): its extras are checked
against pyproject.toml instead. ``python`` and ``sonic`` are this environment's.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sonic.launch.process import start_process
from sonic.launch.serve import ServerProcess, wait_for_ready_line

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Serve your own model in five steps"
QUICK = ["--measurement-interval-s", "0.5", "--stable-windows", "2", "--max-windows", "3"]
QUICK += ["--stability-percentage", "50"]


def blocks() -> list[tuple[str, str]]:
    """(language, text) of every fenced block of the section, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return re.findall(r"```(\w*)\n(.*?)```", text[start:end], re.DOTALL)


def test_the_install_step_names_real_extras() -> None:
    (install, *_) = blocks()
    assert install[0] == "bash"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    commands = [line.split("#")[0].strip() for line in install[1].splitlines()]
    assert commands[0] == "pip install ."
    for command in commands[1:]:
        (named,) = re.findall(r"\.\[([\w,-]+)\]", command)
        assert set(named.split(",")) <= set(extras), command
    others = re.search(r"other extras: ([\w, -]+)", install[1])
    assert others is not None
    assert {e.strip() for e in others[1].split(",")} <= set(extras)


def _run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit in the README's export, run elsewhere
def test_serve_your_own_model_in_five_steps(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    _install, export, files, serve, call, calls, perf = blocks()
    assert [export[0], call[0]] == ["python", "python"]
    assert all(block[0] == "bash" for block in (files, serve, calls, perf))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env["PYTHONWARNINGS"] = "ignore"  # torch's deprecation notices for torch.jit: not the reader's concern

    (tmp_path / "export.py").write_text(export[1])
    done = _run(files[1], tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "models" / "mlp" / "1" / "model.onnx.data").is_file()  # as the README warns
    assert not (tmp_path / "models" / "mlp" / "config.pbtxt").exists()  # completed by the server

    (serve_line,) = [line for line in serve[1].splitlines() if line.startswith("sonic serve")]
    argv = ["0" if arg in ("8001", "8000") else arg for arg in shlex.split(serve_line)]
    argv = [str(tmp_path / arg) if arg == "models" else arg for arg in argv]
    command = [sys.executable, "-m", "sonic.cli.main", *argv[1:]]
    log = tmp_path / "serve.log"
    process, addresses = start_process(
        command, log, lambda p: wait_for_ready_line(p, 240.0), read_stdout=True
    )
    with ServerProcess(process, addresses, log) as server:
        grpc, http = server.grpc_address, server.http_address

        def here(text: str) -> str:
            return text.replace("localhost:8001", grpc).replace("localhost:8000", http)

        (tmp_path / "call.py").write_text(here(call[1]))
        done = _run(here(calls[1]), tmp_path, env)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.strip().splitlines()
        answer = json.loads(lines[-1])  # curl's
        assert answer["model_name"] == "mlp"
        (output,) = answer["outputs"]
        assert output["name"] == "y"
        assert output["shape"] == [1, 3]
        assert "[[" in lines[0]  # the printed arrays of tritonclient and sonic.client

        done = _run(f"{here(perf[1]).strip()} {' '.join(QUICK)}", tmp_path, env)
        assert done.returncode == 0, done.stderr
        assert "sonic perf: wrote JSON to perf.json" in done.stderr
        report = json.loads((tmp_path / "perf.json").read_text())
        assert [r["concurrency"] for r in report["results"]] == [1, 2, 4]
        assert report["errors"] == 0
        assert report["max_batch_size"] == 4  # the auto-completed default the README explains

        # The batch-size paragraph: tritonclient's batch of 10 is refused, in Triton's words.
        refused = here(call[1]).replace("random((4, 4)", "random((10, 4)")
        (tmp_path / "batch10.py").write_text(refused)
        done = _run("python batch10.py", tmp_path, env)
        assert done.returncode != 0
        assert "inference request batch-size must be <= 4" in done.stderr
