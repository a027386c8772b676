"""`sonic deploy local` as a user runs it: progress while replicas load, a replica SIGKILLed and
restarted, and no process left behind afterwards (issue 23, items 6b and 6c).

The models here are Python-backend models whose ``initialize`` takes a while (a slow load, as
ten real models warming up on two cores) or starts a subprocess of its own (a model's helper
process, the child a dead replica would orphan).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Self

import numpy as np
import pytest

from sonic.client import ClientConfig, SyncClient
from sonic.models.simple import write_sample_repository

from .conftest import scalar, wait_for_prometheus

pytestmark = pytest.mark.integration

IDENTITY = {"INPUT0": np.arange(16, dtype=np.float32).reshape(1, 16)}
PYTHON_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
MODEL_PY = """
import subprocess
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        time.sleep({load_s})  # the model's own slow load (weights, warm-up), not a synchronisation
        self.helper = None
        if {pid_dir!r}:
            # A helper process of the model's own, in the replica's process group.
            self.helper = subprocess.Popen(["sleep", "600"])
            with open({pid_dir!r} + "/helper-%d" % self.helper.pid, "w"):
                pass

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""


def python_model(root: Path, name: str, *, load_s: float = 0.0, pid_dir: Path | None = None) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(PYTHON_CONFIG)
    (root / name / "1" / "model.py").write_text(MODEL_PY.format(load_s=load_s, pid_dir=str(pid_dir or "")))


def alive(pid: int) -> bool:
    """Running, not a zombie (an orphan reparented to a PID 1 that does not reap stays a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def descendants(pid: int) -> set[int]:
    found: set[int] = set()
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
            children = [int(c) for t in tasks for c in (t / "children").read_text().split()]
        except FileNotFoundError:
            continue
        found.update(children)
        pending += children
    return found


class DeployCli:
    """``sonic deploy local`` in a session of its own; its stdout and stderr read line by line."""

    def __init__(self, args: list[str]) -> None:
        command = [sys.executable, "-m", "sonic.cli.main", "deploy", "local", "--port", "0", *args]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        self.lines: list[tuple[float, str]] = []  # (monotonic time, line)
        self._changed = threading.Condition()
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,))
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self._changed.notify_all()
        with self._changed:
            self.lines.append((time.monotonic(), "<EOF>"))
            self._changed.notify_all()

    def wait_line(self, pattern: str, timeout_s: float = 180.0, after: int = 0) -> re.Match[str]:
        """The first line from index ``after`` on that matches; fails at the end of output or ``timeout_s``."""
        compiled = re.compile(pattern)

        def found() -> re.Match[str] | None:
            return next((m for _, line in self.lines[after:] if (m := compiled.search(line))), None)

        def ended() -> bool:
            return bool(self.lines) and self.lines[-1][1] == "<EOF>"

        with self._changed:
            if not self._changed.wait_for(lambda: found() is not None or ended(), timeout_s):
                pytest.fail(f"no line matching {pattern!r} in {timeout_s} s:\n{self.text()}")
            match = found()
        assert match is not None, f"no line matching {pattern!r} before the end:\n{self.text()}"
        return match

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(120)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
            self._reader.join()
            assert self.process.stdout is not None
            self.process.stdout.close()
        return code

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def helper_repository(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """identity and add_sub, and a Python model that starts a helper process per replica."""
    root = write_sample_repository(tmp_path / "repository")
    pid_dir = tmp_path / "helpers"
    pid_dir.mkdir()
    python_model(root, "with_helper", pid_dir=pid_dir)
    yield root, pid_dir
    for path in pid_dir.iterdir():  # a failed test must not leave sleeps behind either
        pid = int(path.name.removeprefix("helper-"))
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def helpers(pid_dir: Path) -> set[int]:
    return {int(p.name.removeprefix("helper-")) for p in pid_dir.iterdir()}


def test_a_sigkilled_replica_is_restarted_and_nothing_outlives_the_deployment(
    helper_repository: tuple[Path, Path], prometheus_binary: Path, tmp_path: Path
) -> None:
    repository, pid_dir = helper_repository
    args = ["--model-repository", str(repository), "--replicas", "2", "--prometheus", "--prometheus-port", "0",
            "--prometheus-binary", str(prometheus_binary), "--scrape-interval", "1s",
            "--workdir", str(tmp_path / "stack")]  # fmt: skip
    with DeployCli(args) as cli:
        ready = cli.wait_line(r"^sonic: ready (?P<fields>.*)$")
        fields = dict(f.split("=", 1) for f in ready["fields"].split())
        started = descendants(cli.process.pid)
        assert len(helpers(pid_dir)) == 2  # one helper per replica
        assert helpers(pid_dir) <= started
        victim = int(cli.wait_line(r"replica 0: started \(pid (\d+)\)")[1])
        victim_helpers = helpers(pid_dir) & descendants(victim)
        assert len(victim_helpers) == 1

        before_kill = len(cli.lines)
        os.kill(victim, signal.SIGKILL)
        cli.wait_line(
            rf"replica 0 \(pid {victim}\) was killed by signal 9; restarting it on ", after=before_kill
        )
        address = re.escape(fields["replicas"].split(",")[0])
        cli.wait_line(rf"replica 0: ready, 3 models, grpc={address}$", after=before_kill)
        assert not alive(victim)
        assert not any(alive(p) for p in victim_helpers), "the dead replica's helper process was orphaned"
        assert len(helpers(pid_dir)) == 3  # the restarted replica started its own
        # The restarted replica serves behind Envoy again, and Prometheus scrapes it (same ports).
        with SyncClient("identity", ClientConfig(servers=(fields["envoy"],))) as client:
            for _ in range(20):
                np.testing.assert_array_equal(client.infer(IDENTITY)["OUTPUT0"], IDENTITY["INPUT0"])
        everything = started | descendants(cli.process.pid)
        assert len(everything) >= len(started) + 1
        # Two replicas and Envoy, all up: the restarted replica's metrics port is the one Prometheus knows.
        wait_for_prometheus(fields["prometheus"], "count(up == 1)", lambda r: scalar(r) == 3.0)
        code = cli.stop()
    assert code == 0, cli.text()
    left = sorted(p for p in everything | helpers(pid_dir) if alive(p))
    assert left == [], f"processes left after `sonic deploy local` stopped: {left}"


def test_slow_replicas_show_progress_and_are_waited_for_while_they_load(tmp_path: Path) -> None:
    """Each replica takes over 18 s (6 models of 3 s); --ready-timeout-s 15 bounds silence, not the start.

    The first silence is the replica's own start (imports: up to 10 s on this shared machine).
    """
    repository = tmp_path / "repository"
    for index in range(6):
        python_model(repository, f"slow_{index}", load_s=3.0)
    begin = time.monotonic()
    with DeployCli(
        ["--model-repository", str(repository), "--replicas", "2", "--ready-timeout-s", "15"]
    ) as cli:
        cli.wait_line(r"^sonic: ready ")
        took_s = time.monotonic() - begin
        code = cli.stop()
    assert code == 0, cli.text()
    assert took_s > 15, f"the start took {took_s:.1f} s: the repository was not slow enough to test anything"
    text = cli.text()
    for replica in (0, 1):
        assert f"replica {replica}: started (pid" in text
        loaded = re.findall(rf"replica {replica}: model (slow_\d) loaded \((\d) so far\)", text)
        assert sorted(name for name, _ in loaded) == [f"slow_{i}" for i in range(6)], text
        assert [count for _, count in loaded] == ["1", "2", "3", "4", "5", "6"], text
        assert f"replica {replica}: ready, 6 models" in text
    # Progress came while loading: the first model line well before the ready line.
    times = {line: at for at, line in cli.lines}
    first = min(at for line, at in times.items() if "model slow_" in line)
    ready = next(at for line, at in times.items() if line.startswith("sonic: ready "))
    assert ready - first > 10.0, text


def test_a_replica_silent_for_the_ready_timeout_is_given_up_and_nothing_is_left(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    python_model(repository, "stuck", load_s=600)
    with DeployCli(
        ["--model-repository", str(repository), "--replicas", "2", "--ready-timeout-s", "15"]
    ) as cli:
        cli.wait_line("<EOF>", timeout_s=120)
        code = cli.process.wait()
    text = cli.text()
    assert code == 1, text
    assert "sonic deploy local: replica 0 printed nothing for 15 s" in text
    assert "loading models" in text  # the log's tail: it started, then the model's load hung
    pids = [int(p) for p in re.findall(r"replica \d: started \(pid (\d+)\)", text)]
    assert len(pids) == 2
    assert not any(alive(p) for p in pids), text
