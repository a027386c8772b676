"""``sonic cmstriton start|stop|check``: CMSSW's cmsTriton verbs and options, running ``sonic serve``."""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

pytestmark = pytest.mark.integration


def cmstriton(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sonic.cli.main", "cmstriton", *argv]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture
def repository(test_repository: Path, tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    shutil.copytree(test_repository / "identity", repo / "identity")
    return repo


def _grpc_port(output: str) -> int:
    match = re.search(r"^CMS_TRITON_GRPC_PORT: (\d+)$", output, re.MULTILINE)
    assert match, output
    return int(match[1])


def _infer(port: int) -> None:
    with grpcclient.InferenceServerClient(f"127.0.0.1:{port}") as client:
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(np.full((1, 16), 2.0, np.float32))
        np.testing.assert_array_equal(
            client.infer("identity", [tensor]).as_numpy("OUTPUT0"), np.full((1, 16), 2.0)
        )


def test_start_prints_the_port_serves_and_stop_cleans_up(repository: Path, tmp_path: Path) -> None:
    work = tmp_path / "job"
    work.mkdir()
    started = cmstriton(work, "-P", "-1", "-M", str(repository), "-n", "job1", "start")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "server is ready!" in started.stdout
    port = _grpc_port(started.stdout)
    pid = int((work / ".job1" / "sonic-serve.pid").read_text())
    try:
        _infer(port)
        again = cmstriton(work, "-P", "-1", "-M", str(repository), "-n", "job1", "start")
        assert again.returncode == 1
        assert "may already exist (override with -f)" in again.stdout
    finally:
        stopped = cmstriton(work, "-n", "job1", "stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not (work / ".job1").exists()
    assert not Path(f"/proc/{pid}").exists() or b"sonic" not in Path(f"/proc/{pid}/cmdline").read_bytes()


def test_instances_option_serves_an_edited_copy(repository: Path, tmp_path: Path) -> None:
    started = cmstriton(
        tmp_path, "-P", "-1", "-m", str(repository / "identity"), "-I", "2", "-n", "inst", "-v", "start"
    )
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        _infer(_grpc_port(started.stdout))
        config = (tmp_path / ".inst" / "local_model_repo" / "identity" / "config.pbtxt").read_text()
        assert "count: 2 kind: KIND_CPU" in config
        assert 'key: "intra_op_thread_count"' in config
    finally:
        stopped = cmstriton(tmp_path, "-n", "inst", "-v", "stop")
    assert stopped.returncode == 0
    assert (tmp_path / "log_inst.log").is_file()  # -v keeps the log


def test_parent_watch_stops_the_server_when_the_process_ends(repository: Path, tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        started = cmstriton(
            tmp_path, "-P", "-1", "-M", str(repository), "-n", "w", "-p", str(sleeper.pid), "start"
        )
        assert started.returncode == 0, started.stdout + started.stderr
        pid = int((tmp_path / ".w" / "sonic-serve.pid").read_text())
        fd = os.pidfd_open(pid)
    finally:
        assert sleeper.stdin is not None
        sleeper.stdin.close()  # the watched process ends
        sleeper.wait(30)
    try:
        readable, _, _ = select.select([fd], [], [], 120)  # the server exits once the watcher stops it
        assert readable
    finally:
        os.close(fd)
        cmstriton(tmp_path, "-n", "w", "-f", "stop")  # no-op when the watcher did its job


def test_stop_of_an_unknown_instance_fails_and_check_answers(tmp_path: Path) -> None:
    stopped = cmstriton(tmp_path, "-n", "nothing", "stop")
    assert stopped.returncode == 1
    assert "attempt to stop unknown container nothing" in stopped.stdout
    checked = cmstriton(tmp_path, "check")
    assert checked.returncode == 0
    assert "can run" in checked.stdout


def test_dry_run_prints_the_server_command(repository: Path, tmp_path: Path) -> None:
    result = cmstriton(tmp_path, "-D", "-d", "-P", "9000", "-M", str(repository), "-v", "start")
    assert result.returncode == 0
    assert "--grpc-port=9001" in result.stdout
    assert "--log-verbose=1" in result.stdout
    assert "-d has no effect" in result.stderr
    assert not (tmp_path / ".triton_server_instance").exists()
