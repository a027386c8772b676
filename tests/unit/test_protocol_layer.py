"""The protocol layer is the bottom layer: it imports no server, client, perf or workflow code, and
grpcio only in its gRPC codec. Two packages make it: ``sonic.protocol`` (the KServe v2 vocabulary) and
``sonic.h2`` (the HTTP/2 + gRPC-call stack). The vocabulary does not depend on a transport: ``sonic.protocol``
never imports ``sonic.h2``. The stack carries bytes of any meaning: of the vocabulary it takes only the error
statuses (``sonic.protocol.errors.GrpcCode``, the gRPC status codes its call layer speaks)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sonic.h2
import sonic.protocol

pytestmark = pytest.mark.unit

PROTOCOL = Path(sonic.protocol.__file__).parent
H2 = Path(sonic.h2.__file__).parent
MODULES = sorted([*PROTOCOL.glob("*.py"), *H2.glob("*.py")])
GRPC_CODECS = {PROTOCOL / "grpc_codec.py"}
SIBLING = {PROTOCOL: "sonic.h2", H2: "sonic.protocol"}  # what each of the two packages must not import
ALLOWED_ACROSS = {PROTOCOL: set[str](), H2: {"sonic.protocol.errors"}}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", MODULES, ids=[f"{p.parent.name}/{p.name}" for p in MODULES])
def test_protocol_module_imports_only_the_protocol_layer(path: Path) -> None:
    imported = _imports(path)
    upward = {
        n
        for n in imported
        if n.split(".")[:2] in (["sonic", p] for p in ("server", "client", "perf", "workflow"))
    }
    assert not upward, f"{path.name} imports {sorted(upward)}"
    grpcio = {n for n in imported if n == "grpc" or n.startswith("grpc.")}
    if path not in GRPC_CODECS:
        assert not grpcio, f"{path.name} imports {sorted(grpcio)}; only {sorted(GRPC_CODECS)} may"
    sibling = SIBLING[path.parent]
    across = {n for n in imported if n == sibling or n.startswith(f"{sibling}.")} - ALLOWED_ACROSS[
        path.parent
    ]
    assert not across, f"{path.parent.name}/{path.name} imports {sorted(across)}"


def test_the_grpc_codec_and_the_h2_stack_are_checked() -> None:
    assert set(MODULES) >= GRPC_CODECS
    assert {p.name for p in MODULES if p.parent == H2} >= {
        "connection.py",
        "server.py",
        "client.py",
        "aio.py",
    }
