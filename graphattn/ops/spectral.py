"""Eigenpairs of normalized graph Laplacians for :class:`graphattn.AddLaplacianPE`.

Per connected component: dense ``numpy.linalg.eigh`` for small ones (BLAS held to one thread,
many small graphs are faster that way), sparse ``scipy.sparse.linalg.eigsh`` for large ones
with a fixed start vector (Lanczos; shift-invert for band-like graphs where Lanczos stalls),
and a deterministic sign per eigenvector, so the same graph always gives the same bits.
"""
from __future__ import annotations

import contextlib
import functools

import numpy as np

__all__ = ["component_eigs", "fix_sign", "single_thread_blas"]


def fix_sign(vecs: np.ndarray) -> np.ndarray:
    """Make each column's entry of largest magnitude positive (first index wins near-ties)."""
    if vecs.size == 0:
        return vecs
    mag = np.abs(vecs)
    top = mag.max(axis=0, keepdims=True)
    first = np.argmax(mag >= top * (1.0 - 1e-6), axis=0)  # (m,) robust to round-off ties
    sign = np.sign(vecs[first, np.arange(vecs.shape[1])])
    sign[sign == 0] = 1.0
    return vecs * sign + 0.0  # + 0.0 turns -0.0 into 0.0


@functools.lru_cache(maxsize=None)
def _blas_controller():
    try:
        from threadpoolctl import ThreadpoolController  # ships with scikit-learn
    except ImportError:  # pragma: no cover
        return None
    return ThreadpoolController()  # built once: inspecting the loaded libraries costs ~1 ms


def single_thread_blas(n: int):
    """A context manager holding BLAS to one thread for dense work on ``n``-sized problems
    (``n >= 32``; a no-op below that or without threadpoolctl): dense eigh of a few hundred
    nodes is fastest on one thread (50x faster on a busy CPU)."""
    controller = _blas_controller() if n >= 32 else None
    return contextlib.nullcontext() if controller is None else controller.limit(limits=1, user_api="blas")


#: shift-invert is tried when the reverse Cuthill-McKee bandwidth b of the Laplacian keeps a
#: banded LU small (n * b below this); beyond it (expander-like social graphs) LU fill-in can
#: take minutes and gigabytes, so plain Lanczos goes on instead
_SHIFT_INVERT_BUDGET = 50_000_000


def _sparse_smallest(lap, k: int):
    """The k smallest eigenpairs of a sparse normalized Laplacian (n > k), deterministic.

    Lanczos on the smallest algebraic eigenvalues (``which="SA"``) is fast on most graphs but
    crawls when they are clustered (paths, long sequences: λ_j ≈ (πj/n)², 52 s for a 5000-node
    path); after 1000 iterations it switches to shift-invert around -0.01 (``L + 0.01 I`` is
    positive definite, 0.3 s there) when the graph is band-like enough for a cheap LU."""
    # scipy: only for Laplacian PEs, not on `import graphattn`
    from scipy.sparse.csgraph import reverse_cuthill_mckee
    from scipy.sparse.linalg import ArpackNoConvergence, eigsh

    n = lap.shape[0]
    v0 = np.random.default_rng(0).standard_normal(n)  # fixed start vector: deterministic
    try:
        return eigsh(lap, k=k, which="SA", v0=v0, maxiter=1000)
    except ArpackNoConvergence:
        pass
    perm = reverse_cuthill_mckee(lap.tocsr(), symmetric_mode=True)
    rows, cols = lap.tocsr()[perm][:, perm].nonzero()
    bandwidth = int(np.abs(rows - cols).max()) if rows.size else 0
    if n * max(bandwidth, 1) <= _SHIFT_INVERT_BUDGET:
        return eigsh(lap.tocsc(), k=k, sigma=-1e-2, which="LM", v0=v0)
    # slow but sure; a wider Krylov space than the default 2k+1 converges several times faster on
    # large evenly connected graphs (200k nodes, degree 10: 140 s -> 36 s)
    # (the Krylov basis is n x ncv float64: kept under ~200 MB, the default 2k+1 for huge graphs)
    return eigsh(lap, k=k, which="SA", v0=v0, ncv=min(n - 1, max(2 * k + 1, min(60, 25_000_000 // n))))


def component_eigs(adj, m: int, dense_threshold: int):
    """The m smallest non-trivial eigenpairs of one connected component (n >= 2 nodes) of a
    graph with scipy sparse adjacency ``adj``: ``(values (m',), vectors (n, m'))``, m' <= m,
    values clipped to [0, 2]; dense ``eigh`` up to ``dense_threshold`` nodes, else Lanczos."""
    import scipy.sparse as sp  # scipy: only for Laplacian PEs, not on `import graphattn`

    n = adj.shape[0]
    dinv = sp.diags(1.0 / np.sqrt(np.asarray(adj.sum(axis=1)).ravel()))
    lap = (sp.identity(n, format="csr") - dinv @ adj @ dinv).tocsr()
    if n <= dense_threshold or m + 1 >= n:  # eigsh needs k < n
        with single_thread_blas(n):
            vals, vecs = np.linalg.eigh(lap.toarray())
    else:
        vals, vecs = _sparse_smallest(lap, m + 1)
        order = np.argsort(vals, kind="stable")
        vals, vecs = vals[order], vecs[:, order]
    # Column 0 spans the null space of a connected component (D^{1/2} 1): the trivial one.
    return np.clip(vals[1:m + 1], 0.0, 2.0), vecs[:, 1:m + 1]
