"""Positional and structural encodings as PyG transforms (``BaseTransform``), computed once per graph.

* :class:`AddLaplacianPE` -- the k non-trivial eigenvectors of the symmetric normalized Laplacian
  with the smallest eigenvalues (Dwivedi & Bresson 2020), padded and deterministic. Written here
  rather than taken from PyG: PyG's ``AddLaplacianEigenvectorPE`` crashes for k >= N, draws a
  random sign once at preprocessing time and uses a random ARPACK start vector (PyG #7499).
* :class:`AddRandomWalkPE` -- random-walk return probabilities (RWSE), PyG's transform of the
  same name and signature rewritten (exact up to 4000 nodes, estimated above): PyG's (2.8)
  replaces every edge weight by the clamped inverse degree, so weighted graphs get wrong values,
  and its dense path (N <= 2000) counts a duplicated edge once where its sparse path counts it
  twice; it also squares sparse matrices, which fills in on large social graphs (see
  :func:`graphattn.data.structural.random_walk_pe`, which this calls).

The encoders that read them (:class:`~graphattn.nn.LapPEEncoder`, a linear layer for RWSE) are in
:mod:`graphattn.nn`.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform
from torch_geometric.transforms.add_positional_encoding import add_node_attr

from graphattn.data.structural import random_walk_pe
from graphattn.ops.spectral import component_eigs, fix_sign
from graphattn.utils.validation import check_edge_index, check_int

__all__ = ["AddLaplacianPE", "AddRandomWalkPE"]


class AddLaplacianPE(BaseTransform):
    r"""Laplacian eigenvector positional encoding ("Benchmarking GNNs", Dwivedi et al. 2020).

    With :math:`L = I - D^{-1/2} A D^{-1/2}` (self-loops removed; :math:`A \leftarrow
    \max(A, A^T)` unless ``is_undirected``; an isolated node has :math:`L_{ii} = 0`, Chung's
    convention), stores the eigenvectors of the ``k`` smallest *non-trivial* eigenvalues.

    Conventions (all deterministic: the same graph gives the same bits on every call):

    * **Trivial eigenvectors**: the null space of :math:`L` has one dimension per connected
      component, so the spectrum is computed per component and the first eigenpair of each
      (eigenvalue 0) is dropped; the ``k`` smallest remaining eigenvalues over all components
      are kept (ties by component order). Entries outside a vector's component are 0, so an
      isolated node gets an all-zero (finite) row.
    * **Padding**: a graph with fewer than ``k`` non-trivial eigenpairs (e.g. ``N <= k``) gets
      zero columns at the end, with the eigenvalue 0 and the mask ``False`` there.
    * **Sign**: each eigenvector is flipped so that its entry of largest magnitude (first
      index among near-ties) is positive. Random flipping belongs to :class:`LapPEEncoder`.
    * **Solver**: components with ``<= dense_threshold`` nodes use dense ``numpy.linalg.eigh``;
      larger ones ``scipy.sparse.linalg.eigsh`` with a fixed start vector (Lanczos; shift-invert
      for band-like graphs where Lanczos stalls, e.g. long paths). For a repeated
      eigenvalue the basis of its eigenspace is the solver's (fixed for a fixed solver).

    Use it as a ``pre_transform`` to compute the decomposition once per dataset.

    Args:
        k (int): number of eigenvectors K.
        attr_name (str): attribute for the eigenvectors. (default: ``"lap_pe"``)
        eigval_attr_name (str, optional): attribute for the eigenvalues, broadcast per node so
            that batching concatenates them; ``None`` to skip. (default: ``"lap_eigval"``)
        mask_attr_name (str, optional): attribute for the mask; ``None`` to skip.
            (default: ``"lap_pe_mask"``)
        is_undirected (bool): the edges already come in both directions with equal weights:
            ``A`` is not symmetrised but checked (a ``ValueError`` otherwise). (default: ``False``)
        dense_threshold (int): largest component solved densely. (default: ``300``)

    Shapes:
        adds ``lap_pe`` ``(N, K)`` float32, ``lap_eigval`` ``(N, K)`` float32 (every row equal),
        ``lap_pe_mask`` ``(N, K)`` bool (False in padded columns). ``data.edge_weight``
        ``(E,)``, if present, weights the edges (duplicates summed; must be finite and
        non-negative); otherwise ``A`` is binary. ``edge_index`` ids must lie in ``[0, N)``.
    """

    def __init__(self, k: int, attr_name: str = "lap_pe", eigval_attr_name: Optional[str] = "lap_eigval",
                 mask_attr_name: Optional[str] = "lap_pe_mask", is_undirected: bool = False,
                 dense_threshold: int = 300) -> None:
        if not isinstance(attr_name, str):
            raise ValueError(f"attr_name must be a str, got {attr_name!r}")
        self.k = check_int("k", k, 1)
        self.attr_name = attr_name
        self.eigval_attr_name = eigval_attr_name
        self.mask_attr_name = mask_attr_name
        self.is_undirected = is_undirected
        self.dense_threshold = check_int("dense_threshold", dense_threshold, 0)

    def _adjacency(self, data: Data, num_nodes: int):
        import scipy.sparse as sp  # scipy: only for Laplacian PEs, not on `import graphattn`

        src, dst = data.edge_index.detach().cpu().numpy()
        weight = getattr(data, "edge_weight", None)
        w = np.ones(src.shape[0]) if weight is None else weight.detach().cpu().double().numpy().reshape(-1)
        if w.shape[0] != src.shape[0]:
            raise ValueError(f"edge_weight must have shape ({src.shape[0]},), got {tuple(weight.shape)}")
        if not np.isfinite(w).all():
            bad = int((~np.isfinite(w)).sum())
            raise ValueError(f"edge_weight contains NaN or inf values ({bad} of {w.shape[0]} edges): "
                             "the Laplacian PE needs finite, non-negative weights")
        if (w < 0).any():
            raise ValueError(f"edge_weight must be non-negative for a Laplacian PE (min {w.min():g})")
        keep = src != dst  # self-loops do not change the graph's geometry
        adj = sp.coo_matrix((w[keep], (dst[keep], src[keep])), shape=(num_nodes, num_nodes)).tocsr()
        adj.sum_duplicates()
        if weight is None:
            adj.data[:] = 1.0
        if not self.is_undirected:
            adj = adj.maximum(adj.T).tocsr()
        elif (abs(adj - adj.T) > 1e-12 * max(1.0, float(np.abs(adj.data).max(initial=0.0)))).nnz:
            raise ValueError("AddLaplacianPE(is_undirected=True) got a graph whose edges (or edge weights) are "
                             "not symmetric: add the reverse edges (torch_geometric.utils.to_undirected) or "
                             "use is_undirected=False, which symmetrises A <- max(A, A^T)")
        adj.eliminate_zeros()
        return adj

    def forward(self, data: Data) -> Data:
        num_nodes, k, edge_index = data.num_nodes, self.k, data.edge_index
        if num_nodes is None:
            raise ValueError("AddLaplacianPE needs data.num_nodes (or data.x) to be known")
        if edge_index is not None:
            check_edge_index(edge_index, num_nodes, name="data.edge_index")
        pe, eigval, found = np.zeros((num_nodes, k)), np.zeros(k), 0
        if num_nodes > 1 and edge_index is not None and edge_index.numel() > 0:
            from scipy.sparse.csgraph import connected_components  # scipy: only for Laplacian PEs

            adj = self._adjacency(data, num_nodes)
            num_comp, labels = connected_components(adj, directed=False)
            members = np.split(np.argsort(labels, kind="stable"),
                               np.cumsum(np.bincount(labels, minlength=num_comp))[:-1])
            vals, cols = [np.zeros(0)], []  # candidate eigenpairs: value, (node ids, vector)
            for nodes in (m for m in members if m.shape[0] > 1):  # isolated nodes: no pairs
                v, vec = component_eigs(adj[nodes][:, nodes], min(k, nodes.shape[0] - 1),
                                         self.dense_threshold)
                vals.append(v)
                cols.extend((nodes, vec[:, j]) for j in range(vec.shape[1]))
            all_vals = np.concatenate(vals)
            chosen = np.argsort(all_vals, kind="stable")[:k]  # the k smallest over all components
            for c, idx in enumerate(chosen):
                pe[cols[idx][0], c], eigval[c] = cols[idx][1], all_vals[idx]
            found = chosen.shape[0]
            pe[:, :found] = fix_sign(pe[:, :found])
        device = edge_index.device if edge_index is not None else None
        data[self.attr_name] = torch.from_numpy(pe).to(device, torch.float32)
        if self.eigval_attr_name is not None:
            per_node = np.tile(eigval, (num_nodes, 1))  # (N, K): batching concatenates rows
            data[self.eigval_attr_name] = torch.from_numpy(per_node).to(device, torch.float32)
        if self.mask_attr_name is not None:
            data[self.mask_attr_name] = torch.arange(k, device=device).lt(found).repeat(num_nodes, 1)
        return data

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(k={self.k})"


class AddRandomWalkPE(BaseTransform):
    r"""Random-walk structural encoding (Dwivedi et al. 2022): the return probabilities
    :math:`[P^k]_{ii}`, k = 1..``walk_length``, with :math:`P = D^{-1} A`.

    PyG's ``AddRandomWalkPE`` with the same arguments and output format, computed by
    :func:`graphattn.data.structural.random_walk_pe` instead (see the module doc for what is
    wrong with PyG's): ``data.edge_weight`` ``(E,)``, if present, weights ``A`` (finite, >= 0;
    ``D`` = weighted out-degree); a duplicated edge counts with its multiplicity, a directed edge
    j -> i (``edge_index[:, e] = (j, i)``) only in row j; isolated nodes get zeros.

    Values: **exact** for graphs of up to ``exact_max_nodes`` nodes (equal to PyG's on unweighted
    graphs without duplicate edges), at O(N²) memory. Above, k = 1, 2 (and 3 within a budget)
    stay exact and the rest are a seeded Monte-Carlo **estimate** with ``num_probes`` probes
    (relative error ~ sqrt(2 / num_probes), ~18 % at 64; small odd-k values of directed graphs
    are noisier), clamped to [0, 1] — what a structural encoding of a large social graph
    needs; raise ``exact_max_nodes`` for exact values when N² floats fit in memory.

    Args:
        walk_length (int): number of steps K.
        attr_name (str, optional): attribute for the ``(N, K)`` float32 encoding; ``None``
            concatenates it to ``data.x``. (default: ``"random_walk_pe"``)
        exact_max_nodes (int): largest graph computed exactly. (default: ``4000``)
        num_probes (int): Monte-Carlo probes above it. (default: ``64``)
        seed (int): seed of the probes (the same graph gives the same estimate). (default: ``0``)
    """

    def __init__(self, walk_length: int, attr_name: Optional[str] = "random_walk_pe", *,
                 exact_max_nodes: int = 4000, num_probes: int = 64, seed: int = 0) -> None:
        self.walk_length = check_int("walk_length", walk_length, 1)
        self.attr_name = attr_name
        self.exact_max_nodes = check_int("exact_max_nodes", exact_max_nodes, 0)
        self.num_probes = check_int("num_probes", num_probes, 1)
        self.seed = int(seed)

    def forward(self, data: Data) -> Data:
        n, edge_index = data.num_nodes, data.edge_index
        if n is None:
            raise ValueError("AddRandomWalkPE needs data.num_nodes (or data.x) to be known")
        if edge_index is None:
            edge_index = torch.zeros(2, 0, dtype=torch.long)
        check_edge_index(edge_index, n, name="data.edge_index")
        weight = getattr(data, "edge_weight", None)
        pe = random_walk_pe(edge_index.cpu(), n, self.walk_length, exact_max_nodes=self.exact_max_nodes,
                            num_probes=self.num_probes, seed=self.seed,
                            edge_weight=None if weight is None else weight.cpu())
        return add_node_attr(data, pe.to(edge_index.device), attr_name=self.attr_name)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.walk_length})"
