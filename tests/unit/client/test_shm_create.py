"""The client's shared-memory regions cannot be planted in advance by another local user."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from sonic.client.shm import SHM_ROOT, Region

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("planted", ["link", "file"])
def test_a_planted_name_is_refused_not_opened(tmp_path: Path, planted: str) -> None:
    name = f"sonic_unit_planted_{uuid.uuid4().hex}"
    path = SHM_ROOT / name
    target = tmp_path / "target"
    target.write_bytes(b"precious")
    if planted == "link":
        path.symlink_to(target)
    else:
        path.write_bytes(b"planted")
    try:
        with pytest.raises(FileExistsError):
            Region(name, 4096)
        assert target.read_bytes() == b"precious"
        assert path.is_symlink() == (planted == "link")  # left as it was, not unlinked by the client
    finally:
        path.unlink(missing_ok=True)


def test_regions_are_private() -> None:
    region = Region(f"sonic_unit_private_{uuid.uuid4().hex}", 4096)
    try:
        assert region.path.stat().st_mode & 0o777 == 0o600
    finally:
        region.close()
    assert not region.path.exists()
