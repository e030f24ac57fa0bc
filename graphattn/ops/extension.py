"""The C++ extension of graphattn (fused edge attention and seeded dropout): build, cache, load.

The extension (``graphattn/ops/csrc/edge_attention.cpp``) is compiled once with
:func:`torch.utils.cpp_extension.load` (``-O3 -fopenmp``; no ``-march=native``, the hot loops
carry a runtime-dispatched AVX2 clone instead, so the cache can be shared across machines)
into ``$GRAPHATTN_BUILD_DIR`` or ``~/.cache/graphattn/torch_extensions``, in a folder keyed
on the torch and Python versions and a hash of the sources' contents and location (two copies
of the package do not share a folder), and reused by later processes. Without
ninja (``cpp_extension`` requires it) the same source is compiled with one direct compiler
call instead (``GRAPHATTN_NO_NINJA=1`` forces that route).
:func:`fused_available` returns ``False`` (and warns once) when the build fails, e.g. with
no C++ compiler; ``GRAPHATTN_NO_CPP=1`` forces ``False`` without trying. A ``lock`` file left
in the build folder by a killed build is removed once it is older than
:data:`STALE_LOCK_SECONDS` (10 min) instead of blocking every later process forever.
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Optional

import torch

__all__ = ["fused_available", "build_directory", "ops", "build_state", "build_error", "disabled", "clear_stale_lock",
           "STALE_LOCK_SECONDS"]

_SRC = Path(__file__).resolve().parent / "csrc" / "edge_attention.cpp"
#: Every source of the extension (the attention kernel and the seeded dropout, one library).
_SOURCES = (_SRC, _SRC.with_name("dropout.cpp"))
_LOCK = threading.Lock()
_EXT = None
_TRIED = False
_WARNED = False
_ERROR: Optional[str] = None


def disabled() -> bool:
    """Whether ``GRAPHATTN_NO_CPP`` (any value but empty, 0, false, no) turns the C++ extension off."""
    return os.environ.get("GRAPHATTN_NO_CPP", "").strip().lower() not in ("", "0", "false", "no")


def build_directory() -> Path:
    """Folder the extension is built in (and cached across processes): ``$GRAPHATTN_BUILD_DIR``,
    else ``~/.cache/graphattn/torch_extensions`` (not under ``$GRAPHATTN_CACHE``, which projects and
    tests point at private folders: one build serves them all)."""
    base = os.environ.get("GRAPHATTN_BUILD_DIR")
    root = Path(base).expanduser() if base else Path.home() / ".cache" / "graphattn" / "torch_extensions"
    # the sources' contents and their location: the build.ninja torch writes names the sources by
    # absolute path, so two copies of the package (a venv and a clone) sharing one folder would
    # recompile on every switch between them
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in _SOURCES)
                            + b"|".join(os.fsencode(p.resolve()) for p in _SOURCES)).hexdigest()[:12]
    tag = (f"torch{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-"
           f"{platform.machine()}-{digest}")
    return root / re.sub(r"[^A-Za-z0-9_.+-]", "_", tag)


_NAME = "graphattn_edge_attention"
_CFLAGS = ["-O3", "-fopenmp"]


#: A ``lock`` file in the build folder older than this (seconds) is stale (a build takes seconds).
STALE_LOCK_SECONDS = 600.0


def clear_stale_lock(build_dir: Path, max_age: float = STALE_LOCK_SECONDS,
                      poll: float = 0.5) -> bool:
    """Wait for a live build's ``lock`` to go away, but remove one older than ``max_age``.

    ``torch.utils.cpp_extension.load`` serialises builds with a ``lock`` file in the build
    folder and waits for as long as it exists; a process killed mid-build leaves it behind,
    and every later process would hang. This waits at most until the lock is ``max_age``
    seconds old, then deletes it (warning once) and returns ``True``.
    """
    lock = build_dir / "lock"
    while True:
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            return False
        if age > max_age:
            try:
                lock.unlink()
            except FileNotFoundError:
                pass
            warnings.warn(f"graphattn: removed a stale build lock ({lock}, {age / 60:.0f} min old) "
                          "left by an interrupted build", RuntimeWarning, stacklevel=3)
            return True
        time.sleep(min(poll, max_age - age + 0.01))


def _load():
    from torch.utils import cpp_extension  # imports setuptools: only when the extension is built

    build_dir = build_directory()
    build_dir.mkdir(parents=True, exist_ok=True)
    verbose = os.environ.get("GRAPHATTN_VERBOSE_BUILD", "") not in ("", "0")
    ninja = cpp_extension.is_ninja_available() and not os.environ.get("GRAPHATTN_NO_NINJA")
    built = build_dir / (f"{_NAME}.so" if ninja else f"{_NAME}_direct.so")
    started = time.monotonic()
    if not built.exists():  # a compile, not a load from the cache: say so instead of a silent minute
        print(f"graphattn: building the CPU attention kernel, once per torch version (about a minute; "
              f"set GRAPHATTN_NO_CPP=1 to skip it and use the slower pure PyTorch path) in {build_dir}",
              file=sys.stderr, flush=True)
    if ninja:
        clear_stale_lock(build_dir)
        cpp_extension.load(
            name=_NAME,
            sources=[str(p) for p in _SOURCES],
            extra_cflags=_CFLAGS,
            extra_ldflags=["-fopenmp"],
            build_directory=str(build_dir),
            is_python_module=False,  # ops are registered with TORCH_LIBRARY: no pybind11 headers
            verbose=verbose,
        )
    else:
        torch.ops.load_library(_build_without_ninja(build_dir, verbose))
    if time.monotonic() - started > 5.0:
        print(f"graphattn: CPU attention kernel ready ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    return torch.ops.graphattn_ea


def _build_without_ninja(build_dir: Path, verbose: bool) -> str:
    """Compile the extension with one direct compiler call (for machines without ninja).

    The result is written to a temporary name and renamed into place, so concurrent
    processes never load a half-written library; later processes reuse it.
    """
    from torch.utils import cpp_extension  # imports setuptools: only when the extension is built

    lib = build_dir / f"{_NAME}_direct.so"
    if lib.exists():
        return str(lib)
    cxx = os.environ.get("CXX", "c++")
    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    abi = [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    torch_lib = Path(torch.__file__).resolve().parent / "lib"
    ldflags = ["-shared", "-fopenmp", f"-L{torch_lib}", "-lc10", "-ltorch_cpu", "-ltorch"]
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=build_dir)
    os.close(fd)
    errors = []
    try:
        for std in ("-std=c++20", "-std=c++17"):
            cmd = [cxx, *map(str, _SOURCES), "-fPIC", std, *_CFLAGS, *abi, *includes, *ldflags, "-o", tmp]
            if verbose:
                print(" ".join(cmd), file=sys.stderr)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode == 0:
                os.replace(tmp, lib)
                return str(lib)
            errors.append(proc.stderr.strip()[-2000:])
        raise RuntimeError(f"compiling {', '.join(p.name for p in _SOURCES)} failed:\n" + "\n".join(errors))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# torch.compile calls it once while tracing (building the kernel then, if needed) and keeps the
# answer as a constant of the graph, instead of a graph break around the build
@torch.compiler.assume_constant_result
def fused_available() -> bool:
    """Whether the fused C++ kernel can be used (builds it on the first call)."""
    if disabled():
        return False
    if _TRIED:
        return _EXT is not None
    return _try_build()


@torch.compiler.disable  # file system and compiler calls: never traced by torch.compile
def _try_build() -> bool:
    global _EXT, _TRIED, _WARNED, _ERROR
    with _LOCK:
        if not _TRIED:
            try:
                _EXT = _load()
            except Exception as exc:  # no compiler, no ninja, compile error, ...
                _EXT = None
                _ERROR = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
                if not _WARNED:
                    _WARNED = True
                    where = str(build_directory().parent)
                    unwritable = getattr(exc, "errno", None) in (1, 13, 30) and where in str(exc)
                    fix = ("The build folder is not writable: point GRAPHATTN_BUILD_DIR at a writable folder"
                           if unwritable else "Install a C++ compiler and ninja (`pip install ninja`)")
                    warnings.warn(
                        "graphattn: could not build the fused C++ edge-attention kernel "
                        f"({_ERROR}); using the pure PyTorch path. {fix} for the fast path, or set "
                        "GRAPHATTN_NO_CPP=1 to silence this warning.",
                        RuntimeWarning,
                        stacklevel=3,
                    )
            _TRIED = True
    return _EXT is not None


def ops():
    """The extension's operators (``torch.ops.graphattn_ea``); call :func:`fused_available` first."""
    if _EXT is None:
        raise RuntimeError("graphattn C++ extension is not loaded" + (f" ({_ERROR})" if _ERROR else ""))
    return _EXT


def build_state() -> str:
    """``"loaded"``, ``"disabled"`` (``GRAPHATTN_NO_CPP``), ``"failed"`` (a build was tried and failed) or
    ``"not used"`` (nothing needed it yet in this process)."""
    if _EXT is not None:
        return "loaded"
    if disabled():
        return "disabled"
    return "failed" if _TRIED else "not used"


def build_error() -> Optional[str]:
    """Why the last build failed (None if it did not, or was not tried)."""
    return _ERROR
