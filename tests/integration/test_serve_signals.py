"""``sonic serve`` and Ctrl-C as uvicorn does it: the first SIGINT/SIGTERM drains, a second one exits at once."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sonic.h2.frames import FrameType, frame
from sonic.launch.process import killed_after, terminate
from sonic.launch.serve import wait_for_ready_line
from sonic.testing.h2peer import RawH2, grpc_headers

pytestmark = pytest.mark.integration

LINE_TIMEOUT_S = 60.0


def _read_until(process: subprocess.Popen[str], text: str) -> list[str]:
    """The server's output lines up to the first that contains ``text`` (the process killed past the
    deadline, which ends the read: see ``sonic.launch.process.killed_after``)."""
    assert process.stdout is not None
    lines: list[str] = []
    with killed_after(process, LINE_TIMEOUT_S):
        for line in iter(process.stdout.readline, ""):
            lines.append(line)
            if text in line:
                return lines
    raise AssertionError(f"no line with {text!r} before the output ended or {LINE_TIMEOUT_S} s; got {lines}")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_second_signal_during_the_drain_exits_at_once(
    test_repository: Path, sig: signal.Signals, code: int
) -> None:
    command = [sys.executable, "-m", "sonic.cli.main", "serve", "--host", "127.0.0.1", "--grpc-port", "0"]
    # A drain that would last ten minutes: only the second signal can end the process within the test.
    command += ["--model-repository", str(test_repository), "--exit-timeout-secs", "600"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        address = wait_for_ready_line(process, 120.0)["grpc"]
        with RawH2(address, timeout_s=LINE_TIMEOUT_S) as peer:
            # A call in flight whose request never ends: the drain waits for it until the exit timeout.
            # The PING is answered after the HEADERS are read, so the call is open when the signal goes.
            peer.send(peer.headers(1, grpc_headers("ModelInfer")), frame(FrameType.PING, 0, 0, bytes(8)))
            peer.wait_for(FrameType.PING)
            process.send_signal(sig)
            _read_until(process, "shutdown requested: draining")
            process.send_signal(sig)
            lines = _read_until(process, "again: exiting now")
            assert process.wait(timeout=LINE_TIMEOUT_S) == code, lines
        assert f"{sig.name} again: exiting now" in lines[-1]
    finally:
        terminate(process, 10.0)
