"""CMSSW parity options, checksum verification, shared-memory cleanup on both sides."""

from __future__ import annotations

import hashlib
import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sonic.client import ClientConfig, ModelVersionError
from sonic.client.checksum import verify
from sonic.client.cleanup import ExitCleanup
from sonic.protocol.shm_names import owner_exited, pid_namespace, region_prefix
from sonic.server.shm.opening import SHM_ROOT
from sonic.server.shm.regions import SharedMemoryRegistry

pytestmark = pytest.mark.unit


def test_environment_options() -> None:
    env = {
        "SONIC_SERVERS": "a:1",
        "SONIC_LOCAL_BALANCER_HOST": "balancer.site",
        "SONIC_TIMEOUT": "2.5",
        "SONIC_PREFERRED_SERVER": "a:1",
        "SONIC_HANDLE_SIGNALS": "1",
    }
    config = ClientConfig.from_env(env)
    assert config.servers == ("a:1", "balancer.site:8001")
    assert (config.timeout_s, config.preferred_server, config.handle_signals) == (2.5, "a:1", True)
    v6 = ClientConfig.from_env({"SONIC_LOCAL_BALANCER_HOST": "::1", "SONIC_LOCAL_BALANCER_PORT": "9"})
    assert v6.servers == ("[::1]:9",)
    assert ClientConfig.from_env({"SONIC_TIMEOUT": "none"}).timeout_s is None
    assert ClientConfig().timeout_s == 60.0  # the documented default deadline


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"timeout_s": 0}, "timeout_s must be > 0 or None"),
        ({"keepalive_s": -1}, "keepalive_s must be > 0"),
        ({"probe_backoff_s": 2, "probe_backoff_max_s": 1}, "below probe_backoff_s"),
        ({"preferred_server": "nohost"}, "expected host:port"),
    ],
)
def test_bad_resilience_settings_are_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClientConfig.from_mapping(data)


def test_checksums_match_the_local_model_files(tmp_path: Path) -> None:
    config = tmp_path / "m" / "config.pbtxt"
    (tmp_path / "m" / "1").mkdir(parents=True)
    config.write_text("max_batch_size: 4\n")
    model = tmp_path / "m" / "1" / "model.onnx"
    model.write_bytes(b"weights")
    digest = hashlib.md5(b"weights", usedforsecurity=False).hexdigest()
    assert verify("m", "s:1", {"MD5:1/model.onnx": digest, "SHA1:x": "ignored"}, config) == 1
    with pytest.raises(
        ModelVersionError, match=r"checksum .* of .*model.onnx does not match .* from server s:1"
    ):
        verify("m", "s:1", {"MD5:1/model.onnx": "0" * 32}, config)
    with pytest.raises(ModelVersionError, match=r"missing.onnx .* cannot be read"):
        verify("m", "s:1", {"MD5:1/missing.onnx": digest}, config)


def test_exit_cleanup_unlinks_what_is_left(tmp_path: Path) -> None:
    cleanup = ExitCleanup()
    kept, left = tmp_path / "kept", tmp_path / "left"
    for path in (kept, left):
        path.write_bytes(b"x")
        cleanup.add(path)
    cleanup.discard(kept)  # closed normally: no longer the cleanup's business
    cleanup.run()
    assert kept.exists()
    assert not left.exists()


def _segment(name: str) -> Path:
    path = SHM_ROOT / name
    with path.open("wb") as handle:
        handle.truncate(mmap.PAGESIZE)
    return path


def test_server_reclaims_regions_of_exited_clients_only() -> None:
    exited = subprocess.run(
        [sys.executable, "-c", "from sonic.protocol.shm_names import region_prefix; print(region_prefix())"],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ},
    ).stdout.strip()
    assert owner_exited(exited + "_1", pid_namespace())
    live = region_prefix()
    other_namespace = f"sonic_{exited.split('_')[1]}_n1_abc"
    paths = [
        _segment(f"{exited}_1"),
        _segment(f"{live}_1"),
        _segment(f"{other_namespace}_1"),
        _segment(f"{live}_2"),
    ]
    registry = SharedMemoryRegistry()
    try:
        for path in reversed(paths):  # the exited client's last: each register reclaims first
            registry.register(path.name, f"/{path.name}", 0, mmap.PAGESIZE)
        paths[3].unlink()  # its owner unlinked it without unregistering
        assert sorted(registry.reclaim()) == sorted([paths[0].name, paths[3].name])
        assert not paths[0].exists()  # the dead client's object is unlinked too
        assert {r.name for r in registry.status("")} == {paths[1].name, paths[2].name}
    finally:
        registry.close()
        for path in paths:
            path.unlink(missing_ok=True)
