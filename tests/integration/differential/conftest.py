"""Both servers, started once per module on the same model repository: real Triton 2.51 and ``sonic serve``.

Triton is the ``tritonserver`` binary in the nvidia-pytriton wheel with its Python backend on CPU;
without it the differential tests are skipped. Both run in explicit model-control mode with every
model loaded at start, so the model-control cases can load and unload the ``spare`` model.

The session's :class:`~tests.integration.differential.compare.Session` counts the message sites the
cases reach (written as JSON at the end, a one-line summary printed) and, where asked, records or
replays Triton's answers (:mod:`~tests.integration.differential.reach`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
from tests.integration.differential.calls import Caller, Endpoint, Pair
from tests.integration.differential.compare import Both, Session
from tests.integration.differential.reach import RECORD_ENV, REPLAY_ENV, SITES_ENV, TritonTape
from tests.integration.differential.repository import MODELS, write_repository
from tests.integration.triton_helpers import backend_directory_or_skip, start_triton

from sonic.launch import ServerProcess
from sonic.launch.process import ServerHandle

CONTROL = ("--model-control-mode=explicit", "--load-model=*")
SESSION = pytest.StashKey[Session]()
SITES_PATH = pytest.StashKey[Path]()


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


@pytest.fixture(scope="session")
def differential_session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    record, replay = os.environ.get(RECORD_ENV), os.environ.get(REPLAY_ENV)
    tape = None
    if replay:
        tape = TritonTape.open(Path(replay), replaying=True)
    elif record:
        tape = TritonTape.open(Path(record), replaying=False)
    session = Session(tape=tape)
    request.config.stash[SESSION] = session
    yield session
    path = Path(os.environ.get(SITES_ENV) or tmp_path_factory.getbasetemp() / "differential-sites.json")
    path.write_text(json.dumps(session.hits.report(), indent=1), encoding="utf-8")
    request.config.stash[SITES_PATH] = path


@pytest.fixture(autouse=True)
def _current_test(differential_session: Session, request: pytest.FixtureRequest) -> None:
    differential_session.test = request.node.nodeid


def both_of(pair: Pair, session: Session) -> Both:
    return Both(None if pair.triton is None else Caller(pair.triton), Caller(pair.sonic), session)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, differential_session: Session) -> Iterator[Pair]:
    repository = write_repository(tmp_path_factory.mktemp("differential") / "models")
    with ExitStack() as stack:
        yield start_pair(
            stack, repository, [m.name for m in MODELS], replaying=differential_session.replaying
        )


@pytest.fixture(scope="module")
def both(pair: Pair, differential_session: Session) -> Iterator[Both]:
    callers = both_of(pair, differential_session)
    try:
        yield callers
    finally:
        callers.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    session = config.stash.get(SESSION, None)
    if session is None:
        return
    report = session.hits.report()
    terminalreporter.write_line(
        f"differential: {report['checked']} of {report['sites']} message sites checked against Triton's "
        f"words, {report['reached']} reached; per site: {config.stash.get(SITES_PATH, '(not written)')}"
    )
