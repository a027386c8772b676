"""The compiled hot path (issue 37): which mode is loaded, ``SONIC_PURE_PYTHON=1``, a stale build, the same bytes.

``./dev test`` runs the suite in the mode the install built (compiled where a C compiler was found) and the
unit tests of the compiled modules once more in the other mode; it says which it expects in
``SONIC_EXPECT_MODE`` (``compiled`` or ``pure``), checked here against the modules actually loaded.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import sonic
from sonic import compiled

pytestmark = pytest.mark.unit

PACKAGE = Path(sonic.__file__).parent
WORKER = PACKAGE.parents[1] / "benchmarks" / "h2_cost_worker.py"


def _is_extension(path: str) -> bool:
    return any(path.endswith(suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def _built() -> bool:
    """An extension module lies beside the sources (a wheel or an in-place build compiled them)."""
    folder = compiled.source_path(PACKAGE, "sonic.h2.stream").parent
    return any(_is_extension(str(path)) for path in folder.glob("stream.*"))


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )


def _loaded_files(**env: str) -> list[str]:
    code = (
        "import importlib, json\n"
        "from sonic.compiled import COMPILED_MODULES\n"
        "print(json.dumps([importlib.import_module(m).__file__ for m in COMPILED_MODULES]))\n"
    )
    result = _python(code, **env)
    assert result.returncode == 0, result.stderr
    files: list[str] = json.loads(result.stdout)
    return files


def test_every_compiled_module_is_loaded_in_one_mode() -> None:
    files = [importlib.import_module(module).__file__ or "" for module in compiled.COMPILED_MODULES]
    pure = os.environ.get(compiled.PURE_PYTHON_VARIABLE) == "1" or not _built()
    if pure:
        assert all(path.endswith(".py") for path in files), files
    else:
        assert all(_is_extension(path) for path in files), files
    expected = os.environ.get("SONIC_EXPECT_MODE")
    if expected is not None:
        assert expected == ("pure" if pure else "compiled"), files


def test_pure_python_variable_makes_every_source_win() -> None:
    files = _loaded_files(SONIC_PURE_PYTHON="1")
    expected = [str(compiled.source_path(PACKAGE, module)) for module in compiled.COMPILED_MODULES]
    assert files == expected


def test_without_the_variable_a_build_is_loaded() -> None:
    if not _built():
        pytest.skip("not compiled here (no C compiler at install, or SONIC_PURE_PYTHON=1 then)")
    environment = {key: value for key, value in os.environ.items() if key != compiled.PURE_PYTHON_VARIABLE}
    result = subprocess.run(
        [sys.executable, "-c", "import sonic.h2.stream as s; print(s.__file__)"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=environment,
    )
    assert _is_extension(result.stdout.strip()), result.stdout


def test_both_modes_write_the_same_bytes() -> None:
    """The server core fed the same requests byte for byte (benchmarks/h2_cost_worker.py) answers with
    the same bytes compiled and pure; the h2 unit tests run in both modes under ./dev test too."""
    if not _built():
        pytest.skip("not compiled here: one mode only")

    def digest(pure: str) -> str:
        result = subprocess.run(
            [sys.executable, str(WORKER), "300"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            env={**os.environ, compiled.PURE_PYTHON_VARIABLE: pure},
        )
        return result.stdout.strip()

    compiled_digest, pure_digest = digest("0"), digest("1")
    assert len(compiled_digest) == 64
    assert compiled_digest == pure_digest


def _fake_package(tmp_path: Path) -> Path:
    package = tmp_path / "sonic"
    source = compiled.source_path(package, "sonic.h2.stream")
    source.parent.mkdir(parents=True)
    source.write_text("X = 1\n")
    return package


def test_a_source_changed_since_an_in_place_build_is_named(tmp_path: Path) -> None:
    package = _fake_package(tmp_path)
    assert compiled.changed_source(package) is None  # no record: a wheel, or never built
    digests = compiled.source_digests(package, ["sonic.h2.stream"])
    (package / compiled.SOURCES_RECORD).write_text(json.dumps(digests))
    assert compiled.changed_source(package) is None
    compiled.source_path(package, "sonic.h2.stream").write_text("X = 2\n")
    assert compiled.changed_source(package) == "sonic.h2.stream"


def test_the_source_finder_answers_for_the_compiled_modules_only(tmp_path: Path) -> None:
    package = _fake_package(tmp_path)
    finder = compiled.SourceFinder(package)
    spec = finder.find_spec("sonic.h2.stream", None)
    assert spec is not None
    assert spec.origin == str(compiled.source_path(package, "sonic.h2.stream"))
    assert finder.find_spec("sonic.h2", None) is None
    assert finder.find_spec("sonic.server.manager", None) is None


def test_a_stale_build_runs_the_sources_and_says_so() -> None:
    """A record that no longer matches: the sources win, with a warning naming the module and the fix."""
    code = (
        "import sys, warnings\n"
        "from pathlib import Path\n"
        "from unittest import mock\n"
        "import sonic.compiled as c\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, c.SourceFinder)]\n"
        "with mock.patch.object(c, 'changed_source', return_value='sonic.h2.stream'):\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        c.choose(Path(c.__file__).parent)\n"
        "print(caught[0].category.__name__, caught[0].message)\n"
        "import sonic.h2.stream as s\n"
        "print(s.__file__)\n"
    )
    result = _python(code, SONIC_PURE_PYTHON="0")
    assert result.returncode == 0, result.stderr
    warning, loaded = result.stdout.strip().splitlines()
    assert warning.startswith("StaleBuildWarning sonic.h2.stream changed since it was compiled")
    assert "./dev compile" in warning
    assert loaded.endswith("stream.py")


def test_every_listed_module_has_its_source() -> None:
    assert len(set(compiled.COMPILED_MODULES)) == len(compiled.COMPILED_MODULES)
    for module in compiled.COMPILED_MODULES:
        assert compiled.source_path(PACKAGE, module).is_file(), module


def _imported_roots(tree: ast.Module) -> dict[str, str]:
    """A module's top-level import bindings: the name bound -> the module it comes from."""
    roots: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                roots[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            for alias in node.names:
                roots[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return roots


def _base_root(base: ast.expr) -> str | None:
    """``hpack.Decoder`` -> ``hpack``, ``Sequence[Request]`` -> ``Sequence``: the name a base starts from."""
    while isinstance(base, ast.Subscript | ast.Attribute):
        base = base.value
    return base.id if isinstance(base, ast.Name) else None


def test_no_compiled_class_derives_from_a_third_party_class() -> None:
    """A compiled module's classes derive only from the standard library's and compiled sonic classes.

    The wheel's isolated build has no third-party packages to type against (hatch_build.py hides them
    from every build): a class over ``hpack.Decoder`` became a native class over ``Any``, laid out
    wrongly, and a clean clone crashed on its first HTTP/2 connection (sonic.h2.hpack_bounded)."""
    stdlib = sys.stdlib_module_names
    wrong = []
    for module in compiled.COMPILED_MODULES:
        tree = ast.parse(compiled.source_path(PACKAGE, module).read_text())
        roots = _imported_roots(tree)
        local = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                name = _base_root(base)
                if name in local:
                    origin = module
                elif name in roots:
                    origin = roots[name]
                else:  # Exception, object, ...: or an unknown name, "?"
                    origin = "builtins" if hasattr(builtins, name or "?") else ""
                top = origin.split(".")[0]
                known = top in stdlib or any(
                    origin == m or origin.startswith(f"{m}.") for m in compiled.COMPILED_MODULES
                )
                if name is None or not known:
                    wrong.append(f"{module}.{node.name}({ast.unparse(base)}) from {origin or '?'}")
    assert wrong == []


def _hatch_build() -> Any:
    """hatch_build.py at the repository root, loaded by path (it is no module of sonic)."""
    spec = importlib.util.spec_from_file_location("_hatch_build", PACKAGE.parents[1] / "hatch_build.py")
    assert spec is not None
    assert spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


def test_without_a_c_compiler_the_build_stays_pure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """hatch_build.py, in place on a copy of the sources, with a compiler that fails every file: one line
    says so, and no extension module or record is left (the sources run)."""
    pytest.importorskip("mypyc.build", reason="the build's mypy is not installed here")
    pytest.importorskip("setuptools", reason="the build's setuptools is not installed here")
    hook = _hatch_build()
    copy = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.so", compiled.SOURCES_RECORD)
    shutil.copytree(PACKAGE, copy / "sonic", ignore=skip)
    (copy / "sonic" / compiled.SOURCES_RECORD).write_text("{}")  # an earlier build's, to be removed
    monkeypatch.setattr(hook, "SRC", copy)
    monkeypatch.setattr(hook, "PACKAGE", copy / "sonic")
    monkeypatch.setenv("CC", "/bin/false")  # setuptools' C compiler: every compile fails
    monkeypatch.delenv(compiled.PURE_PYTHON_VARIABLE, raising=False)
    assert hook.build_in_place() is False
    out = capfd.readouterr().out
    assert out.startswith("sonic: not compiled, pure Python (CompileError"), out
    assert len(out.splitlines()) == 1
    assert not [path for path in copy.rglob("*") if _is_extension(str(path))]
    assert not (copy / "sonic" / compiled.SOURCES_RECORD).exists()


def test_removing_a_build_removes_modules_no_longer_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module taken off COMPILED_MODULES since the last in-place build: its extension module goes too (a
    stale one left beside its source would be what Python imports)."""
    hook = _hatch_build()
    package = tmp_path / "src" / "sonic"
    (package / "server").mkdir(parents=True)
    shutil.copyfile(PACKAGE / "compiled.py", package / "compiled.py")  # the hook reads the list from it
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    unlisted = package / "server" / f"dataplane_old{suffix}"
    shared = tmp_path / "src" / f"0123__mypyc{suffix}"
    source = package / "server" / "dataplane_old.py"
    for path in (unlisted, shared, source):
        path.write_bytes(b"")
    (package / compiled.SOURCES_RECORD).write_text("{}")
    monkeypatch.setattr(hook, "SRC", tmp_path / "src")
    monkeypatch.setattr(hook, "PACKAGE", package)
    hook.remove_in_place()
    assert not unlisted.exists()
    assert not shared.exists()
    assert not (package / compiled.SOURCES_RECORD).exists()
    assert source.exists()


def test_no_compiled_function_defines_a_nested_function() -> None:
    """Compiled, a nested function holds every local of the function around it in an environment object, in
    a reference cycle with it: only the cyclic garbage collector frees them. A nested ``where()`` in
    ``models.version`` kept every request's tensor buffer alive that way (15.6 MB requests took 4x the
    server CPU, the kernel zeroing fresh pages): ``functools.partial`` or a method instead."""
    nested: list[str] = []
    for module in compiled.COMPILED_MODULES:
        tree = ast.parse(compiled.source_path(PACKAGE, module).read_text())
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                nested.extend(
                    f"{module}.{function.name}.{node.name}"
                    for node in ast.walk(function)
                    if node is not function and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                )
    assert nested == []


# Built once or more for every request: their __init__ is written out in the class (docs/benchmarks.md,
# "issue 37: identity rate").
PER_REQUEST_CLASSES = (
    ("sonic.protocol.types", "InputTensor"),
    ("sonic.protocol.types", "InferRequest"),
    ("sonic.protocol.types", "OutputTensor"),
    ("sonic.protocol.types", "InferResponse"),
    ("sonic.server.work", "WorkItem"),
    ("sonic.server.metrics.stats", "RequestTiming"),
    ("sonic.server.dataplane", "Arrival"),
)


@pytest.mark.parametrize(("module", "name"), PER_REQUEST_CLASSES)
def test_per_request_dataclasses_write_their_init(module: str, name: str) -> None:
    """A dataclass's generated ``__init__`` is Python that ``dataclasses`` execs at import: compiled, the
    class stays native but its construction runs that interpreted function (0.3-1.4 µs per object against
    ~0.1, ~5 µs of a small request's ~75). Written in the class, mypyc compiles it; and every field is
    still a parameter of it, so ``dataclasses.replace`` keeps working."""
    cls = getattr(importlib.import_module(module), name)
    init = cls.__init__
    assert getattr(getattr(init, "__code__", None), "co_filename", "compiled") != "<string>"
    tree = ast.parse(compiled.source_path(PACKAGE, module).read_text())
    (written,) = (
        node
        for c in tree.body
        if isinstance(c, ast.ClassDef) and c.name == name
        for node in c.body
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    )
    assert [a.arg for a in written.args.args[1:]] == [f.name for f in dataclasses.fields(cls) if f.init]
