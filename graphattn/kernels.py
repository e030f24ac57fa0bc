"""Fused C++ CPU kernel for edge-restricted attention, built on first use and cached.

``fused_edge_attention(q, k, v, csr, bias, scale)`` computes, for every target node i and
head h, ``sum_e softmax_e(scale * q[i,h]·k[j,h] + bias[e,h]) * v[j,h]`` over the incoming
edges ``e = (j -> i)`` of ``csr`` in a single OpenMP-parallel sweep per target row (per-head
max subtracted, so huge logits stay finite), and its backward without any per-edge
``(E, H, C)`` tensor: only ``out`` and the per-(node, head) log-sum-exp are saved; the
backward recomputes the scores, computes grad q in a target-major pass and grad k / grad v
in a source-major pass over ``csr.csc`` (race-free, no atomics).

The extension (``graphattn/csrc/edge_attention.cpp``) is compiled once with
:func:`torch.utils.cpp_extension.load` (``-O3 -fopenmp``; no ``-march=native``, the hot loops
carry a runtime-dispatched AVX2 clone instead, so the cache can be shared across machines)
into ``$GRAPHATTN_BUILD_DIR`` or ``~/.cache/graphattn/torch_extensions``, in a folder keyed
on the torch and Python versions and the source hash, and reused by later processes. Without
ninja (``cpp_extension`` requires it) the same source is compiled with one direct compiler
call instead (``GRAPHATTN_NO_NINJA=1`` forces that route).
:func:`fused_available` returns ``False`` (and warns once) when the build fails, e.g. with
no C++ compiler; ``GRAPHATTN_NO_CPP=1`` forces ``False`` without trying.
"""
from __future__ import annotations

import hashlib
import math
import os
import platform
import re
import sys
import threading
import warnings
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .csr import EdgeCSR

__all__ = ["fused_available", "fused_edge_attention", "build_directory"]

_SRC = Path(__file__).resolve().parent / "csrc" / "edge_attention.cpp"
_LOCK = threading.Lock()
_EXT = None
_TRIED = False
_WARNED = False
_ERROR: Optional[str] = None


def _disabled() -> bool:
    return os.environ.get("GRAPHATTN_NO_CPP", "").strip().lower() not in ("", "0", "false", "no")


def build_directory() -> Path:
    """Folder the extension is built in (and cached across processes)."""
    base = os.environ.get("GRAPHATTN_BUILD_DIR")
    root = Path(base).expanduser() if base else Path.home() / ".cache" / "graphattn" / "torch_extensions"
    digest = hashlib.sha256(_SRC.read_bytes()).hexdigest()[:12]
    tag = (f"torch{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-"
           f"{platform.machine()}-{digest}")
    return root / re.sub(r"[^A-Za-z0-9_.+-]", "_", tag)


_NAME = "graphattn_edge_attention"
_CFLAGS = ["-O3", "-fopenmp"]


def _load():
    from torch.utils import cpp_extension

    build_dir = build_directory()
    build_dir.mkdir(parents=True, exist_ok=True)
    verbose = os.environ.get("GRAPHATTN_VERBOSE_BUILD", "") not in ("", "0")
    if cpp_extension.is_ninja_available() and not os.environ.get("GRAPHATTN_NO_NINJA"):
        cpp_extension.load(
            name=_NAME,
            sources=[str(_SRC)],
            extra_cflags=_CFLAGS,
            extra_ldflags=["-fopenmp"],
            build_directory=str(build_dir),
            is_python_module=False,  # ops are registered with TORCH_LIBRARY: no pybind11 headers
            verbose=verbose,
        )
    else:
        torch.ops.load_library(_build_without_ninja(build_dir, verbose))
    return torch.ops.graphattn_ea


def _build_without_ninja(build_dir: Path, verbose: bool) -> str:
    """Compile the extension with one direct compiler call (for machines without ninja).

    The result is written to a temporary name and renamed into place, so concurrent
    processes never load a half-written library; later processes reuse it.
    """
    import subprocess
    import tempfile

    from torch.utils import cpp_extension

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
            cmd = [cxx, str(_SRC), "-fPIC", std, *_CFLAGS, *abi, *includes, *ldflags, "-o", tmp]
            if verbose:
                print(" ".join(cmd), file=sys.stderr)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode == 0:
                os.replace(tmp, lib)
                return str(lib)
            errors.append(proc.stderr.strip()[-2000:])
        raise RuntimeError(f"compiling {_SRC.name} failed:\n" + "\n".join(errors))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def fused_available() -> bool:
    """Whether the fused C++ kernel can be used (builds it on the first call)."""
    global _EXT, _TRIED, _WARNED, _ERROR
    if _disabled():
        return False
    if _TRIED:
        return _EXT is not None
    with _LOCK:
        if not _TRIED:
            try:
                _EXT = _load()
            except Exception as exc:  # no compiler, no ninja, compile error, ...
                _EXT = None
                _ERROR = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
                if not _WARNED:
                    _WARNED = True
                    warnings.warn(
                        "graphattn: could not build the fused C++ edge-attention kernel "
                        f"({_ERROR}); using the pure PyTorch path. Install a C++ compiler and "
                        "ninja (`pip install ninja`) for the fast path, or set GRAPHATTN_NO_CPP=1 "
                        "to silence this warning.",
                        RuntimeWarning,
                        stacklevel=2,
                    )
            _TRIED = True
    return _EXT is not None


_EMPTY_LONG = torch.empty(0, dtype=torch.long)


class _FusedEdgeAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, csr, scale):
        out, lse = _EXT.forward(q, k, v, bias, csr.rowptr, csr.col, scale)
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.csr = csr
        ctx.scale = scale
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        q, k, v, bias, out, lse = ctx.saved_tensors
        need_q, need_k, need_v, need_b = ctx.needs_input_grad[:4]
        if not (need_q or need_k or need_v or need_b):
            return None, None, None, None, None, None
        csr: EdgeCSR = ctx.csr
        need_kv = bool(need_k or need_v)
        if need_kv:
            csc = csr.csc
            cptr, cperm, ctgt = csc.rowptr, csc.perm, csc.col
        else:
            cptr = cperm = ctgt = _EMPTY_LONG
        dout = dout.to(q.dtype).contiguous()
        gq, gk, gv, gb = _EXT.backward(q, k, v, bias, csr.rowptr, csr.col, cptr, cperm, ctgt,
                                       out, lse, dout, ctx.scale, bool(need_q), need_kv)
        return (gq if need_q else None, gk if need_k else None, gv if need_v else None,
                gb if need_b else None, None, None)


def fused_edge_attention(q: Tensor, k: Tensor, v: Tensor, csr: EdgeCSR,
                         bias: Optional[Tensor] = None, scale: Optional[float] = None) -> Tensor:
    """Edge-restricted multi-head attention with the fused C++ kernel.

    Args:
        q, k, v: ``(N, H, C)`` CPU float32/float64 tensors (same dtype).
        csr: :class:`~graphattn.csr.EdgeCSR` of the graph (targets = rows, sources = ``col``).
        bias: optional ``(E, H)`` additive score bias **in CSR order** (``bias_orig[csr.perm]``).
        scale: score scale, default ``1 / sqrt(C)``.

    Returns ``(N, H, C)``; a node with no incoming edge gets exactly 0. Differentiable w.r.t.
    ``q``, ``k``, ``v`` and ``bias``. Call :func:`fused_available` first.
    """
    if not fused_available():
        raise RuntimeError("graphattn fused C++ kernel is unavailable"
                           + (f" ({_ERROR})" if _ERROR else ""))
    if q.dim() != 3 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must all be (N, H, C); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if q.device.type != "cpu" or k.device.type != "cpu" or v.device.type != "cpu":
        raise ValueError("fused_edge_attention runs on CPU tensors only")
    if q.dtype not in (torch.float32, torch.float64) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"fused_edge_attention needs float32/float64 q, k, v of one dtype; "
                        f"got {q.dtype}, {k.dtype}, {v.dtype}")
    N, H, C = q.shape
    if csr.num_nodes != N or csr.rowptr.numel() != N + 1:
        raise ValueError(f"csr has {csr.num_nodes} nodes but q has {N}")
    E = csr.num_edges
    if bias is not None:
        if bias.shape != (E, H):
            raise ValueError(f"bias must be (E, H) = ({E}, {H}); got {tuple(bias.shape)}")
        bias = bias.to(q.dtype).contiguous()
    if scale is None:
        scale = 1.0 / math.sqrt(C) if C > 0 else 1.0
    return _FusedEdgeAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), bias, csr,
                                     float(scale))
