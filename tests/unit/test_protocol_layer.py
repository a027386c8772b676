"""The protocol layer is the bottom layer: it imports no server, client, perf or workflow code, and
grpcio only in its gRPC codec."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sonic.protocol

pytestmark = pytest.mark.unit

PROTOCOL = Path(sonic.protocol.__file__).parent
MODULES = sorted(PROTOCOL.glob("*.py"))
GRPC_CODECS = {"grpc_codec.py"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_protocol_module_imports_only_the_protocol_layer(path: Path) -> None:
    imported = _imports(path)
    upward = {
        n
        for n in imported
        if n.split(".")[:2] in (["sonic", p] for p in ("server", "client", "perf", "workflow"))
    }
    assert not upward, f"{path.name} imports {sorted(upward)}"
    grpcio = {n for n in imported if n == "grpc" or n.startswith("grpc.")}
    if path.name not in GRPC_CODECS:
        assert not grpcio, f"{path.name} imports {sorted(grpcio)}; only {sorted(GRPC_CODECS)} may"


def test_the_grpc_codec_is_checked() -> None:
    assert {p.name for p in MODULES} >= GRPC_CODECS
