"""``ShutdownSignals``: the first SIGINT/SIGTERM asks for a drain, a second forces the exit, and the
handlers there were before are back afterwards."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from types import FrameType

import pytest

from sonic.server.config import ServerConfig
from sonic.server.server import Server, ShutdownSignals

pytestmark = pytest.mark.unit


def _ours(signum: int, frame: FrameType | None) -> None:
    raise AssertionError(f"signal {signum} reached the handler that ShutdownSignals replaces")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_first_signal_drains_second_exits_and_handlers_come_back(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    before = {s: signal.signal(s, _ours) for s in ShutdownSignals.SIGNALS}
    try:

        async def main() -> list[int]:
            server = Server(ServerConfig(model_repositories=(tmp_path,)))
            exits: list[int] = []
            forced = asyncio.Event()

            def force_exit(status: int) -> None:
                exits.append(status)
                forced.set()

            with ShutdownSignals(asyncio.get_running_loop(), server, force_exit) as signals:
                assert signal.getsignal(sig) is not _ours
                os.kill(os.getpid(), sig)
                await signals.requested.wait()
                assert not exits  # the first one only asks for the drain
                os.kill(os.getpid(), sig)
                await forced.wait()
            return exits

        assert asyncio.run(main()) == [code]
        for s in ShutdownSignals.SIGNALS:
            assert signal.getsignal(s) is _ours
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_handlers_come_back_when_the_server_fails(tmp_path: Path) -> None:
    before = {s: signal.getsignal(s) for s in ShutdownSignals.SIGNALS}

    async def main() -> None:
        server = Server(ServerConfig(model_repositories=(tmp_path,)))
        with ShutdownSignals(asyncio.get_running_loop(), server):
            raise OSError("address in use")

    with pytest.raises(OSError, match="address in use"):
        asyncio.run(main())
    assert {s: signal.getsignal(s) for s in ShutdownSignals.SIGNALS} == before
