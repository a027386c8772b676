"""Model names and folders: nothing is loaded from outside the repositories unless allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from sonic.protocol.errors import InvalidArgumentError
from sonic.server.models.repository import Repository

pytestmark = pytest.mark.unit


def test_linked_model_folders(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "inside" / "1").mkdir(parents=True)
    (tmp_path / "elsewhere" / "model" / "1").mkdir(parents=True)
    (root / "escapee").symlink_to(tmp_path / "elsewhere" / "model", target_is_directory=True)
    (root / "alias").symlink_to(root / "inside", target_is_directory=True)
    strict = Repository((root,), allow_links_outside=False)  # --refuse-model-links-outside
    assert strict.locate("inside").path == root / "inside"
    assert strict.locate("alias").name == "alias"  # a link that stays inside is fine
    with pytest.raises(InvalidArgumentError, match="outside the model repositories"):
        strict.locate("escapee")
    assert Repository((root,)).locate("escapee").name == "escapee"  # followed by default, as Triton
    for name in ("..", ".", "../repo", "a/b", "/etc", ""):
        with pytest.raises(InvalidArgumentError, match="invalid model name"):
            strict.locate(name)
