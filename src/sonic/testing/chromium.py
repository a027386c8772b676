"""Headless Chromium for tests: a page rendered to a PNG screenshot, as a person's browser shows it.

The browser is Debian's ``chromium``, unpacked by ``tools/install-chromium.sh`` (no root needed).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

# Headless, no sandbox (containers), and nothing that reaches out to the network or writes outside
# the throw-away profile directory.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--hide-scrollbars",
)


def install(repository_root: Path) -> Path:
    """The browser's path, installing it with the project's script when this machine has none."""
    script = repository_root / "tools" / "install-chromium.sh"
    done = subprocess.run([str(script)], capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{script} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def render(browser: Path, page: Path, png: Path, profile: Path, size: tuple[int, int] = (1100, 2600)) -> Path:
    """Screenshot of ``page`` (a local file) at ``size`` pixels (width, height)."""
    command = [
        str(browser),
        *FLAGS,
        f"--user-data-dir={profile}",
        f"--window-size={size[0]},{size[1]}",
        f"--screenshot={png}",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0 or not png.is_file():
        raise RuntimeError(f"chromium exited {done.returncode} without {png}: {done.stderr.strip()[-2000:]}")
    return png


def assert_renders(browser: Path, page: Path, workdir: Path, size: tuple[int, int]) -> Path:
    """Render ``page`` at ``size`` into ``workdir/page.png`` and check that a person would see a page: the
    screenshot has that size, and between 2 % and 60 % of it is not background. Returns the PNG."""
    png = render(browser, page, workdir / "page.png", workdir / "profile", size)
    shot_size, fraction = inked(png)
    assert shot_size == size, (shot_size, size)
    assert 0.02 < fraction < 0.6, f"{fraction:.3f} of the page is not background: blank or unstyled page?"
    return png


def inked(png: Path) -> tuple[tuple[int, int], float]:
    """A screenshot's size (width, height) and the fraction of its pixels that are not background: a blank
    or unstyled page has almost none."""
    import matplotlib.pyplot as plt  # noqa: PLC0415  (the perf extra; only the report tests call this)

    pixels = plt.imread(png)  # RGBA floats in [0, 1]
    return (pixels.shape[1], pixels.shape[0]), float((pixels[..., :3].mean(axis=2) < 0.9).mean())
