"""Client configuration from TOML and the environment; fallback container commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from sonic.client import ClientConfig, Compression, FallbackConfig, SharedMemoryMode
from sonic.client.config import Device
from sonic.client.fallback import container_command
from sonic.client.transport.control import is_loopback

pytestmark = pytest.mark.unit


def test_from_toml_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "sonic.toml"
    path.write_text(
        'servers = ["a:8001"]\ntimeout_s = 2.5\ncompression = "gzip"\nallowed_tries = 5\n'
        '[fallback]\nenable = true\nrepositories = ["models"]\nwait_timeout_s = 30\n',
        encoding="utf-8",
    )
    env = {
        "SONIC_CONFIG": str(path),
        "SONIC_SERVERS": "b:1, c:2",
        "SONIC_TOKEN": "t",
        "SONIC_SHARED_MEMORY": "off",
    }
    config = ClientConfig.from_env(env)
    assert config.servers == ("a:8001", "b:1", "c:2")
    assert (config.timeout_s, config.compression, config.allowed_tries) == (2.5, Compression.GZIP, 5)
    assert (config.token, config.shared_memory) == ("t", SharedMemoryMode.OFF)
    assert config.fallback.enable
    assert config.fallback.repositories == (tmp_path / "models",)


def test_from_env_without_anything_is_the_default() -> None:
    assert ClientConfig.from_env({}) == ClientConfig()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"timeout": 1}, "unknown client settings ['timeout']"),
        ({"allowed_tries": 0}, "allowed_tries must be >= 1"),
        ({"servers": ["nohostport"]}, "expected host:port"),
        ({"fallback": {"enable": True}}, "no model repository"),
        ({"fallback": {"container": "lxc"}}, "expected apptainer, docker or podman"),
    ],
)
def test_bad_settings_are_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ClientConfig.from_mapping(data)


def test_container_commands(tmp_path: Path) -> None:
    config = FallbackConfig(
        enable=True, repositories=(tmp_path,), container="docker", image="nvcr.io/triton:24.10"
    )
    command = container_command(config, 9001, Device.GPU)
    assert command[:3] == ["docker", "run", "--rm"]
    assert "--gpus" in command
    assert f"{tmp_path}:/models/0:ro" in command
    assert command[-4:] == [
        "--grpc-port=9001",
        "--allow-http=false",
        "--allow-metrics=false",
        "--model-repository=/models/0",
    ]
    apptainer = FallbackConfig(
        enable=True, repositories=(tmp_path,), container="apptainer", image="triton.sif"
    )
    command = container_command(apptainer, 9001, Device.CPU)
    assert command[:3] == ["apptainer", "exec", "--cleanenv"]
    assert "--nv" not in command


@pytest.mark.parametrize(
    ("address", "local"),
    [("127.0.0.1:1", True), ("localhost:1", True), ("[::1]:1", True), ("10.0.0.1:1", False)],
)
def test_loopback_detection(address: str, local: bool) -> None:
    assert is_loopback(address) is local
