"""rich is the ``demo`` extra's: the rest of sonic imports without it, and ``sonic demo`` says how to
install it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

# rich made unimportable (a None entry in sys.modules fails every import of it), then the code under test.
BLOCK_RICH = "import sys\nfor name in ('rich', 'rich.console', 'rich.progress', 'rich.table'):\n    sys.modules[name] = None\n"


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK_RICH + code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_server_and_client_import_without_rich() -> None:
    code = (
        "import sonic.cli.main, sonic.server.server, sonic.client, sonic.cli.serve, sonic.demos.hlt\n"
        "loaded = [m for m, v in sys.modules.items() if v is not None and m.split('.')[0] == 'rich']\n"
        "assert not loaded, loaded\n"
        "print('ok')\n"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_sonic_demo_says_how_to_install_rich(tmp_path: Path) -> None:
    code = "from sonic.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    result = _python(code, "demo", "--out", str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "sonic demo needs rich" in result.stderr
    assert "pip install 'sonic-inference[demo]'" in result.stderr
    assert "Traceback" not in result.stderr
