"""The package build's hook: the per-request modules compiled with mypyc, the sources kept as the fallback.

Hatchling calls :class:`MypycBuildHook` for every wheel (``[tool.hatch.build.targets.wheel.hooks.custom]``
in pyproject.toml). It compiles the modules :data:`sonic.compiled.COMPILED_MODULES` lists (read from
``src/sonic/compiled.py`` without importing sonic) with mypyc and the C compiler setuptools finds:

- a wheel (``pip install .``): the extension modules go into the wheel beside the sources, and the
  wheel is tagged for this Python and platform;
- an editable install (``pip install -e .``, what ``./dev`` makes): they are written into ``src/``
  beside the sources (git ignores them), with ``src/sonic/.compiled-sources.json``, the digests of
  the sources compiled, so that a source edited later runs as Python (see :mod:`sonic.compiled`)
  until ``./dev compile`` builds again.

Where compiling fails (no C compiler, no Python headers, mypyc refusing) the hook prints one line and
the wheel stays pure Python: sonic runs the same, slower. ``SONIC_PURE_PYTHON=1`` skips compiling (and
removes an editable install's extension modules). Run as a script (``./dev compile``), it builds in
place with the environment's own mypy; ``--if-stale`` only when a source changed since the last build.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script (./dev compile), outside a build
    BuildHookInterface = object  # type: ignore[assignment,misc]

ROOT = Path(__file__).resolve().parent
SRC = ROOT / "src"
PACKAGE = SRC / "sonic"
# mypyc's optimisation level (the C compiler's -O): 2 and mypyc's default 3 measured the same here, in
# instructions per request and in compile time (docs/benchmarks.md "issue 37"); 2 is what was measured.
OPT_LEVEL = "2"


def _compiled() -> ModuleType:
    """``src/sonic/compiled.py``, loaded by path: the build environment has none of sonic's dependencies."""
    spec = importlib.util.spec_from_file_location("_sonic_compiled", PACKAGE / "compiled.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _extension(path: Path) -> bool:
    return any(path.name.endswith(suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES)


@contextlib.contextmanager
def _quiet(log: Path) -> Iterator[None]:
    """mypyc's and the compiler's output into ``log``: file descriptors 1 and 2 (subprocesses) and
    ``sys.stdout``/``sys.stderr`` (which a caller may have replaced, as pytest does)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log.open("w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _build_ext() -> type:
    """setuptools' ``build_ext`` compiling an extension's C files on every core: mypyc's one extension
    holds them all (one per module), which setuptools compiles one after another (27 s of CPU here)."""
    from setuptools.command.build_ext import build_ext  # type: ignore[import-untyped]  # noqa: PLC0415

    jobs = os.cpu_count() or 1

    class ParallelBuildExt(build_ext):  # type: ignore[misc]
        def build_extension(self, ext: Any) -> None:
            serial = self.compiler.compile

            def compile_all(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
                if jobs < 2 or len(sources) < 2:
                    return list(serial(sources, *args, **kwargs))
                first = list(serial(sources[:1], *args, **kwargs))  # creates the output folders
                with ThreadPoolExecutor(jobs) as pool:
                    rest = pool.map(lambda source: serial([source], *args, **kwargs), sources[1:])
                    return first + [path for objects in rest for path in objects]

            self.compiler.compile = compile_all
            try:
                super().build_extension(ext)
            finally:
                del self.compiler.compile

    return ParallelBuildExt


def compile_modules(work: Path) -> list[tuple[Path, str]]:
    """Compile into ``work``; each extension module built and its path inside the package root.

    Raises whatever mypyc or the compiler raised (the log of both is ``work/build.log``)."""
    compiled = _compiled()
    config = work / "mypy.ini"
    # Not the project's strict configuration: a wheel's isolated build environment lacks numpy, hpack,
    # protobuf (their types become Any, which compiles to the same generic operations the interpreter
    # runs). ``no_site_packages`` hides them from ``./dev compile`` too, so that an in-place build and
    # pip's isolated one compile the same code: they once differed, and only the isolated build crashed.
    config.write_text(
        "[mypy]\n"
        f"python_version = {sys.version_info[0]}.{sys.version_info[1]}\n"
        "ignore_missing_imports = True\n"
        "no_site_packages = True\n"
        "explicit_package_bases = True\n"
        f"mypy_path = {SRC}\n"
        f"cache_dir = {work / 'mypy-cache'}\n"
    )
    sources = [str(compiled.source_path(PACKAGE, module)) for module in compiled.COMPILED_MODULES]
    with _quiet(work / "build.log"):
        from mypyc.build import mypycify  # noqa: PLC0415  (the build's dependency, not sonic's)
        from setuptools import Distribution  # type: ignore[import-untyped]  # noqa: PLC0415

        extensions = mypycify(
            [f"--config-file={config}", *sources],
            opt_level=OPT_LEVEL,
            multi_file=True,  # one C file per module: the compiler runs on every core
            target_dir=str(work / "c"),
        )
        distribution = Distribution(
            {"name": "sonic-compiled", "ext_modules": extensions, "cmdclass": {"build_ext": _build_ext()}}
        )
        build_ext: Any = distribution.get_command_obj("build_ext")
        build_ext.build_lib = str(work / "lib")
        build_ext.build_temp = str(work / "tmp")
        distribution.run_command("build_ext")
    lib = work / "lib"
    return [(path, path.relative_to(lib).as_posix()) for path in sorted(lib.rglob("*")) if _extension(path)]


def _reason(error: BaseException, log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    last = next((line.strip() for line in reversed(lines) if "error" in line.lower()), "")
    return f"{type(error).__name__}: {str(error)[:200]}" + (f" ({last[:200]})" if last else "")


def remove_in_place() -> None:
    """An editable install's extension modules (every one in the package: a module taken off the list since
    the last build would otherwise be loaded, stale; and mypyc's shared library at the top of ``src``)
    and its record, gone: the sources run. sonic has no extension modules of its own besides these."""
    compiled = _compiled()
    for path in [*SRC.glob("*__mypyc.*"), *PACKAGE.rglob("*")]:
        if _extension(path):
            path.unlink()
    (PACKAGE / compiled.SOURCES_RECORD).unlink(missing_ok=True)


def build_in_place() -> bool:
    """Compile into ``src/`` (an editable install); True if it did, else the sources run (one line said why)."""
    compiled = _compiled()
    remove_in_place()
    digests = compiled.source_digests(PACKAGE)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sonic-mypyc-") as folder:
        work = Path(folder)
        try:
            built = compile_modules(work)
        except BaseException as error:  # any failure: the sources are the fallback
            if isinstance(error, KeyboardInterrupt):
                raise
            print(f"sonic: not compiled, pure Python ({_reason(error, work / 'build.log')})")
            return False
        for path, relative in built:
            shutil.copyfile(path, SRC / relative)
    (PACKAGE / compiled.SOURCES_RECORD).write_text(json.dumps(digests, indent=1) + "\n")
    print(f"sonic: compiled {len(digests)} modules with mypyc in {time.monotonic() - started:.0f} s")
    return True


def pure_python_requested() -> bool:
    return os.environ.get(_compiled().PURE_PYTHON_VARIABLE) == "1"


class MypycBuildHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def dependencies(self) -> list[str]:
        if pure_python_requested():
            return []
        return ["mypy>=1.11", "setuptools>=68"]

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        if pure_python_requested():
            if version == "editable":
                remove_in_place()
            print("sonic: SONIC_PURE_PYTHON=1: not compiled, pure Python")
            return
        if version == "editable":
            build_in_place()
            return
        self._work = Path(tempfile.mkdtemp(prefix="sonic-mypyc-"))
        started = time.monotonic()
        try:
            built = compile_modules(self._work)
        except BaseException as error:  # any failure: the wheel stays pure Python
            if isinstance(error, KeyboardInterrupt):
                raise
            print(f"sonic: not compiled, pure Python wheel ({_reason(error, self._work / 'build.log')})")
            return
        for path, relative in built:
            build_data["force_include"][str(path)] = relative
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        seconds = time.monotonic() - started
        print(
            f"sonic: compiled {len(built) - 1} modules with mypyc in {seconds:.0f} s"
        )  # and a shared library

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:  # noqa: ARG002
        work = getattr(self, "_work", None)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    """``./dev compile``: build in place (with SONIC_PURE_PYTHON=1: remove the build); ``--if-stale``: only
    where an in-place build's sources changed (with SONIC_PURE_PYTHON=1: nothing, the sources win anyway)."""
    if "--if-stale" in argv:
        if not pure_python_requested() and _compiled().changed_source(PACKAGE) is not None:
            build_in_place()  # if it fails, it said why, and the sources run: nothing to stop for
        return 0
    if pure_python_requested():
        remove_in_place()
        return 0
    return 0 if build_in_place() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
