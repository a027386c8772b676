"""The checksum repository agent, built in: its rules and words (checksum_repository_agent's src/checksum.cc)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InvalidArgumentError, ModelConfigError
from sonic.server.models.load_config import prepare_config
from sonic.server.models.paths import ConfigOrigin, ModelFiles
from sonic.server.models.repo_agents import DEFAULT_REPOAGENT_DIRECTORY, run_repo_agents
from sonic.server.models.repository import ModelLocation

CONTENT = b"the model's bytes\n"
MD5 = hashlib.md5(CONTENT, usedforsecurity=False).hexdigest()


@pytest.fixture
def files(tmp_path: Path) -> ModelFiles:
    folder = tmp_path / "m"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_bytes(CONTENT)
    (folder / "labels.txt").write_text("a\nb\n")
    (tmp_path / "outside.bin").write_bytes(CONTENT)
    return ModelFiles("m", folder)


def _config(*agents: tuple[str, dict[str, str]]) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    for name, parameters in agents:
        agent = config.model_repository_agents.agents.add(name=name)
        agent.parameters.update(parameters)
    return config


def test_good_hashes_pass_whatever_the_algorithms_case(files: ModelFiles) -> None:
    labels = hashlib.md5(b"a\nb\n", usedforsecurity=False).hexdigest()
    run_repo_agents(_config(("checksum", {"MD5:1/model.onnx": MD5, "md5:labels.txt": labels})), files)
    run_repo_agents(_config(("checksum", {"Md5:./1/model.onnx": MD5})), files)
    run_repo_agents(_config(("checksum", {})), files)  # no parameter: nothing to check, as Triton's agent


@pytest.mark.parametrize(
    ("parameters", "words"),
    [
        (
            {"MD5:1/model.onnx": "0" * 32},
            f"Mismatched MD5 hash for file 1/model.onnx, expect: {'0' * 32}, got: {MD5}",
        ),
        (
            {"MD5:1/model.onnx": MD5.upper()},
            f"Mismatched MD5 hash for file 1/model.onnx, expect: {MD5.upper()}, got: {MD5}",
        ),
        ({"1/model.onnx": MD5}, "failed to parse key: 1/model.onnx"),
        ({"SHA256:1/model.onnx": MD5}, "Unsupported checksum algorithm: SHA256"),
        (
            {"MD5:1/missing.onnx": MD5},
            "failed to open text file for read 1/missing.onnx: No such file or directory",
        ),
        ({"MD5:1": MD5}, "failed to open text file for read 1: Is a directory"),
        # Several parameters: every one is checked (the good one first in key order), the bad one refuses.
        ({"MD5:1/model.onnx": MD5, "MD5:labels.txt": MD5}, "Mismatched MD5 hash for file labels.txt"),
    ],
    ids=["mismatch", "uppercase-value", "no-colon", "algorithm", "missing", "folder", "several"],
)
def test_refusals_in_the_agents_words(files: ModelFiles, parameters: dict[str, str], words: str) -> None:
    with pytest.raises(ModelConfigError) as info:
        run_repo_agents(_config(("checksum", parameters)), files)
    assert str(info.value).startswith(words)


@pytest.mark.parametrize(
    ("name", "why"),
    [("../outside.bin", "climbs out with '..'"), ("/etc/hostname", "is an absolute path"), ("", "is empty")],
)
def test_names_outside_the_model_are_refused_by_the_choke_point(
    files: ModelFiles, name: str, why: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=f"model 'm': model_repository_agents 'checksum' .*{why}"):
        run_repo_agents(_config(("checksum", {f"MD5:{name}": MD5})), files)


def test_a_link_out_is_refused_where_the_server_refuses_links(files: ModelFiles) -> None:
    (files.folder / "1" / "linked.bin").symlink_to(files.folder.parent / "outside.bin")
    config = _config(("checksum", {"MD5:1/linked.bin": MD5}))
    run_repo_agents(config, files)  # the repository's author may link out (CVMFS), as Triton follows links
    for strict in (
        ModelFiles("m", files.folder, allow_links_outside=False),
        ModelFiles("m", files.folder, origin=ConfigOrigin.LOAD_OVERRIDE),
    ):
        with pytest.raises(
            InvalidArgumentError, match="leads outside the model's folder through a symbolic link"
        ):
            run_repo_agents(config, strict)


def test_another_agent_is_refused_in_tritons_words(files: ModelFiles) -> None:
    config = _config(("checksum", {"MD5:1/model.onnx": MD5}), ("encrypt", {"key": "x"}))
    with pytest.raises(ModelConfigError) as info:
        run_repo_agents(config, files)
    assert str(info.value) == (
        "unable to find 'libtritonrepoagent_encrypt.so' for repo agent 'encrypt', searched: "
        f"{DEFAULT_REPOAGENT_DIRECTORY} (sonic runs only the built-in 'checksum' repository agent)"
    )


def test_a_load_refused_by_the_agent_is_a_poll_failure_before_anything_else(files: ModelFiles) -> None:
    # No version folder would be the next refusal: the agent runs first, as Triton runs it.
    (files.folder / "1" / "model.onnx").rename(files.folder / "model.onnx")
    (files.folder / "1").rmdir()
    (files.folder / "config.pbtxt").write_text(
        'backend: "onnxruntime"\n'
        f'model_repository_agents {{ agents [ {{ name: "checksum" parameters {{ key: "MD5:model.onnx" value: "{"0" * 32}" }} }} ] }}\n'
    )
    with pytest.raises(ModelConfigError) as info:
        prepare_config(ModelLocation("m", files.folder), None, gpu_count=0)
    assert str(info.value) == (
        "failed to load 'm', failed to poll from model repository: "
        f"Mismatched MD5 hash for file model.onnx, expect: {'0' * 32}, got: {MD5}"
    )
    override = _config(("nosuch", {}))
    with pytest.raises(ModelConfigError) as unknown:
        prepare_config(ModelLocation("m", files.folder), override, gpu_count=0)
    assert str(unknown.value).startswith(
        "failed to load 'm', failed to poll from model repository: unable to find 'libtritonrepoagent_nosuch.so'"
    )
