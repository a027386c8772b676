"""The repository agents a configuration asks for (``model_repository_agents``), run at every load.

Triton's containers ship one agent, ``checksum`` (``libtritonrepoagent_checksum.so``), and CMS's model
repositories carry its sections; sonic runs it built in, with the agent's rules and words
(triton-inference-server/checksum_repository_agent, ``src/checksum.cc``): each parameter's key is
``<algorithm>:<path relative to the model's folder>``, the algorithm (any case) must be MD5, and the file's
MD5, as lowercase hex, must equal the value, or the load fails before any backend reads a file. Each path
goes through :mod:`sonic.server.models.paths`, the choke point for names a configuration gives.

Any other agent is a shared library sonic cannot run: the load is refused as Triton refuses an agent it
cannot find (``src/repo_agent.cc``), naming the folder Triton searches by default. A refusal is a
:class:`~sonic.protocol.errors.ModelConfigError`, which :mod:`.load_config` answers as Triton answers
every failure while it polls the repository (``failed to load '<m>', failed to poll from model
repository``, then these words).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import ModelConfigError
from sonic.server.models.paths import ModelFiles

CHECKSUM_AGENT = "checksum"  # the one agent sonic runs: the name Triton's library is found by
# Where Triton looks for agents unless --repoagent-directory says otherwise (its default).
DEFAULT_REPOAGENT_DIRECTORY = "/opt/tritonserver/repoagents"
READ_CHUNK_BYTES = 1 << 20  # model files can be GBs: hashed in pieces, never read whole


def run_repo_agents(config: model_config_pb2.ModelConfig, files: ModelFiles) -> None:
    """Run each agent of ``config``, in order, on the model's files; the first refusal fails the load."""
    for agent in config.model_repository_agents.agents:
        if agent.name != CHECKSUM_AGENT:  # Triton's words (the library is found by the exact name)
            raise ModelConfigError(
                f"unable to find 'libtritonrepoagent_{agent.name}.so' for repo agent '{agent.name}', "
                f"searched: {DEFAULT_REPOAGENT_DIRECTORY} (sonic runs only the built-in "
                f"'{CHECKSUM_AGENT}' repository agent)"
            )
        verify_checksums(agent.parameters, files)


def verify_checksums(parameters: Mapping[str, str], files: ModelFiles) -> None:
    """The checksum agent: every ``<algorithm>:<file>`` key's file must have the MD5 its value gives."""
    for key, expected in sorted(parameters.items()):  # a protobuf map has no order: sorted, reproducible
        algorithm, colon, name = key.partition(":")
        if not colon:
            raise ModelConfigError(f"failed to parse key: {key}")
        if algorithm.lower() != "md5":
            raise ModelConfigError(f"Unsupported checksum algorithm: {algorithm}")
        path = files.path(f"model_repository_agents '{CHECKSUM_AGENT}' key '{key}'", name)
        digest = hashlib.md5(usedforsecurity=False)
        try:
            with path.open("rb") as stream:
                while chunk := stream.read(READ_CHUNK_BYTES):
                    digest.update(chunk)
        except OSError as exc:
            raise ModelConfigError(f"failed to open text file for read {name}: {exc.strerror}") from None
        got = digest.hexdigest()
        if got != expected:
            raise ModelConfigError(f"Mismatched MD5 hash for file {name}, expect: {expected}, got: {got}")
