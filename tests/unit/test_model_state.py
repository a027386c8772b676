"""Model lifecycle states: one enum on both ends, whose values are the words Triton's index sends."""

from __future__ import annotations

import asyncio

from tritonclient.grpc import service_pb2

from sonic.client.registry import ServerRegistry
from sonic.client.transport.base import IndexEntry
from sonic.client.transport.memory import MemoryServer, MemoryTransport
from sonic.protocol.wire import ModelState


def test_values_are_tritons_words() -> None:
    # tritonserver 2.51 (src/model_repository_manager.cc, ModelReadyStateString) and an unloaded model's "".
    assert [s.value for s in ModelState] == ["READY", "UNAVAILABLE", "LOADING", "UNLOADING", "UNKNOWN", ""]


def test_from_wire_reads_known_words_and_never_fails() -> None:
    assert ModelState.from_wire("READY") is ModelState.READY
    assert ModelState.from_wire("") is ModelState.NONE
    assert ModelState.from_wire("RELOADING") is ModelState.UNKNOWN
    assert ModelState.from_wire("ready") is ModelState.UNKNOWN  # Triton's words are upper case


def test_the_codec_sends_the_word() -> None:
    # The protobuf field is a plain string: the value, not the member's repr, goes on the wire.
    row = service_pb2.RepositoryIndexResponse.ModelIndex(
        name="m", version="1", state=ModelState.LOADING.value
    )
    parsed = service_pb2.RepositoryIndexResponse.ModelIndex.FromString(row.SerializeToString())
    assert parsed.state == "LOADING"
    assert ModelState.from_wire(parsed.state) is ModelState.LOADING


class _IndexOf(MemoryTransport):
    """An in-memory server whose index reports the given states (a real server's mid-reload answer)."""

    def __init__(self, states: dict[str, ModelState]) -> None:
        super().__init__(MemoryServer("memory-0:1", {}))
        self.states = states

    async def repository_index(self) -> list[IndexEntry]:
        return [IndexEntry(name, "1", state) for name, state in self.states.items()]


def test_registry_lists_ready_models_and_those_without_a_state() -> None:
    transport = _IndexOf({f"m_{s.name}": s for s in ModelState})
    registry = ServerRegistry([transport], control_timeout_s=1.0)
    entry = registry.entries[0]
    asyncio.run(registry.refresh(entry, 1.0))
    assert entry.models == {"m_READY", "m_NONE"}
