"""Starting the two servers of a differential test: Triton 2.51 and ``sonic serve`` on one repository."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from tests.integration.differential.calls import Caller, Endpoint, Pair
from tests.integration.differential.compare import Both, Session
from tests.integration.triton_helpers import backend_directory_or_skip, start_triton

from sonic.launch import ServerProcess
from sonic.launch.process import ServerHandle

CONTROL = ("--model-control-mode=explicit", "--load-model=*")


def start_pair(
    stack: ExitStack,
    repository: Path,
    models: Sequence[str],
    *,
    triton_args: Sequence[str] = CONTROL,
    sonic_args: Sequence[str] = CONTROL,
    replaying: bool = False,
) -> Pair:
    """Triton and sonic on ``repository``, started side by side (each start blocks on its own readiness)
    and stopped when ``stack`` closes; only sonic while replaying Triton's answers."""

    def triton() -> tuple[ServerHandle, Endpoint]:
        started = start_triton([repository], models, triton_args)
        return started.process, Endpoint("triton", started.grpc_address, started.http_address)

    def sonic() -> tuple[ServerHandle, Endpoint]:
        process = ServerProcess.start([repository], extra_args=["--http-port", "0", *sonic_args])
        return process, Endpoint("sonic", process.grpc_address, process.http_address)

    if not replaying:
        # Skipped here, in the test's thread, where Triton cannot run (the starts below run in threads).
        backend_directory_or_skip(Path(tempfile.mkdtemp(prefix="sonic-differential-probe-")))
    starters = [sonic] if replaying else [triton, sonic]
    with ThreadPoolExecutor(max_workers=2) as pool:
        starts = [pool.submit(start) for start in starters]
        # Every server that did start is stopped, also when the other failed.
        started = []
        for future in starts:
            if future.exception() is None:
                handle, endpoint = future.result()
                stack.enter_context(handle)
                started.append(endpoint)
        for future in starts:
            future.result()  # raises the start error, after the stack holds the started ones
    return Pair(triton=None if replaying else started[0], sonic=started[-1])


def both_of(pair: Pair, session: Session) -> Both:
    return Both(None if pair.triton is None else Caller(pair.triton), Caller(pair.sonic), session)
