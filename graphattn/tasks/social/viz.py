"""Attention pictures for social graphs: a node's ego-graph, edges coloured by attention.

:func:`last_layer_attention` runs a :class:`~graphattn.NodeClassifier` once and keeps the
attention weights of its last block (mean over heads); :func:`draw_ego_attention` draws the
``hops``-hop ego-graph of one node with networkx + matplotlib: every edge j -> centre
coloured and thickened by α_j,centre (how much the centre listens to j), the other edges of
the ego-graph in light grey, nodes coloured by predicted class, the centre outlined.
matplotlib is imported only here, inside the functions.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn
from torch_geometric.utils import k_hop_subgraph

__all__ = ["last_layer_attention", "draw_ego_attention"]


@torch.no_grad()
def last_layer_attention(model: nn.Module, data, inputs: Dict[str, Optional[Tensor]]
                         ) -> Tuple[Tensor, Tensor, Tensor]:
    """Logits ``(N, classes)`` and the last block's attention over the graph's own edges:
    ``edge_index (2, E)`` and ``alpha (E,)`` (mean over heads). Edges to and from global
    tokens are left out (their share of each node's attention is ``1 - Σ_j α_ij``)."""
    if not len(model.backbone.blocks):
        raise ValueError("the model has 0 transformer layers (num_layers=0): there is no attention to draw")
    block = model.backbone.blocks[-1]
    store: Dict[str, Tensor] = {}
    original = block.forward

    def forward_keeping_weights(x, edge_index, edge_attr=None, batch=None, return_attention_weights=False, **kw):
        out, (ei, alpha) = original(x, edge_index, edge_attr, batch, return_attention_weights=True, **kw)
        store["edge_index"], store["alpha"] = ei, alpha
        return out

    was_training = model.training
    model.eval()
    block.forward = forward_keeping_weights  # instance attribute: nn.Module.__call__ uses it
    try:  # every input the model's own forward takes (edge features, PE eigenvalues and mask)
        kw = ({"edge_attr": inputs["edge_attr"]}
              if inputs.get("edge_attr") is not None and model.backbone.edge_encoder is not None else {})
        if model.backbone.pe_dim:
            kw.update({k: inputs[k] for k in ("pe", "pe_eigvals", "pe_mask") if inputs.get(k) is not None})
        logits = model(inputs["x"], inputs["edge_index"], **kw)
    finally:
        del block.forward
        model.train(was_training)
    E = inputs["edge_index"].size(1)  # the graph's edges come first, token edges after
    return logits, store["edge_index"][:, :E], store["alpha"][:E].float().mean(-1)


def _check_ego_inputs(data, node, edge_index: Tensor, alpha) -> Tuple[int, Tensor]:
    """``(node, alpha (E,))``, or ValueError naming a node outside the graph or misshaped weights."""
    n = int(data.num_nodes)
    if isinstance(node, torch.Tensor) and node.numel() == 1 and not node.is_floating_point():
        node = int(node)
    if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < n:
        raise ValueError(f"node must be a row of the graph, 0..{n - 1}, got {node!r}")
    alpha = torch.as_tensor(alpha)
    if alpha.dim() == 2:  # the layer's (E, H) weights: the mean over heads, as last_layer_attention gives
        alpha = alpha.float().mean(-1)
    if alpha.dim() != 1 or alpha.numel() != edge_index.size(1):
        raise ValueError(f"alpha must have shape (E,) or (E, H) with E = {edge_index.size(1)} edges, "
                         f"got {tuple(alpha.shape)}")
    return int(node), alpha


def _ego_subgraph(node: int, edge_index: Tensor, alpha: Tensor, num_nodes: int, hops: int,
                  max_nodes: int) -> Tuple[Tensor, Tensor, int]:
    """``(nodes drawn, edge mask, nodes in the ego-graph)``: the ``hops``-hop ego-graph of ``node``, cut to
    ``max_nodes``: the centre, the neighbours it attends to most, then hop by hop."""
    # more hops than nodes reach nothing new (k_hop_subgraph allocates per hop: --hops 1000000)
    subset, _, _, mask = k_hop_subgraph(node, min(int(hops), max(num_nodes, 1)), edge_index,
                                        relabel_nodes=False, num_nodes=num_nodes)
    into = edge_index[1] == node
    total = int(subset.numel())
    if total > max_nodes:
        order = torch.argsort(alpha[into], descending=True)
        keep = [node] + [int(j) for j in edge_index[0, into][order].tolist() if int(j) != node]
        keep = list(dict.fromkeys(keep))[:max_nodes]
        for h in range(2, hops + 1):
            if len(keep) >= max_nodes:
                break
            ring, _, _, _ = k_hop_subgraph(node, h, edge_index, num_nodes=num_nodes)
            seen = set(keep)
            keep += [int(v) for v in ring.tolist() if int(v) not in seen][:max_nodes - len(keep)]
        keep = torch.tensor(sorted(keep))
        mask = torch.isin(edge_index[0], keep) & torch.isin(edge_index[1], keep)
        subset = keep
    return subset, mask, total


def draw_ego_attention(data, node: int, edge_index: Tensor, alpha: Tensor, logits: Tensor,
                       class_names: List[str], out, hops: int = 1, max_nodes: int = 60) -> Dict[str, Any]:
    """Draw the ego-graph of ``node`` (a row of ``data``; at most ``max_nodes`` nodes: the
    centre's strongest sources first) to the PNG ``out``; returns a small summary dict.
    Nodes are labelled with ``data.node_id`` (the ids of the input files) when present."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    node, alpha = _check_ego_inputs(data, node, edge_index, alpha)
    subset, mask, total = _ego_subgraph(node, edge_index, alpha, int(data.num_nodes), hops, max_nodes)
    into = edge_index[1] == node
    ei, a = edge_index[:, mask], alpha[mask]
    prob = torch.softmax(logits.float(), -1)
    pred = prob.argmax(-1)
    ids = getattr(data, "node_id", None)
    name = (lambda n: str(int(ids[n]))) if ids is not None else str  # noqa: E731
    g = nx.DiGraph()
    g.add_nodes_from(subset.tolist())
    for (j, i), w in zip(ei.t().tolist(), a.tolist()):
        if j != i:
            g.add_edge(j, i, alpha=w)
    fig, ax = plt.subplots(figsize=(7, 6))
    pos = nx.spring_layout(g.to_undirected(), seed=0)
    cmap = plt.get_cmap("tab10")
    nodes = list(g.nodes)
    nx.draw_networkx_nodes(g, pos, nodelist=nodes, ax=ax, node_size=[420 if n == node else 160 for n in nodes],
                           node_color=[cmap(int(pred[n]) % 10) for n in nodes],
                           edgecolors=["black" if n == node else "white" for n in nodes], linewidths=2)
    nx.draw_networkx_labels(g, pos, labels={n: name(n) for n in nodes}, font_size=7, ax=ax)
    into_c = [e for e in g.edges if e[1] == node]  # what the centre listens to
    context = sorted({tuple(sorted(e)) for e in g.edges if node not in e})  # undirected, grey
    nx.draw_networkx_edges(g, pos, edgelist=context, ax=ax, edge_color="0.8", width=0.6, arrows=False)
    weights = [g.edges[e]["alpha"] for e in into_c]
    vmax = max(weights, default=1.0) or 1.0
    cmap_e = plt.get_cmap("viridis")
    if into_c:
        nx.draw_networkx_edges(g, pos, edgelist=into_c, ax=ax, edge_color=weights, edge_cmap=cmap_e, edge_vmin=0.0,
                               edge_vmax=vmax, arrows=True, arrowsize=12, width=[1.0 + 5.0 * w / vmax for w in weights],
                               node_size=[420 if n == node else 160 for n in nodes], nodelist=nodes)
        sm = plt.cm.ScalarMappable(cmap=cmap_e, norm=plt.Normalize(0.0, vmax))
        fig.colorbar(sm, ax=ax, label=f"attention α_j→{name(node)} (last layer, mean over heads)")
    y = getattr(data, "y", None)
    label = int(y[node]) if y is not None and y.dim() == 1 else None  # (N,) class ids; (N, C) is not one label
    label = label if label is not None and 0 <= label < len(class_names) else None  # -1: unlabelled node
    ax.set_title(f"node {name(node)}: predicted {class_names[int(pred[node])]} (p={float(prob[node].max()):.2f})"
                 + (f", label {class_names[label]}" if label is not None else "")
                 + f"\n{hops}-hop ego-graph"
                 + (f" ({subset.numel()} of its {total} nodes: the most attended first)"
                    if total > subset.numel() else "")
                 + f"; arrows j→{name(node)} coloured by how much {name(node)} attends to j",
                 fontsize=10)
    ax.axis("off")
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)  # also when the file cannot be written: no figure left open
    src, w = edge_index[0, into], alpha[into]
    top = int(torch.argmax(w)) if w.numel() else None
    # what the picture shows: the arrows into the centre and the other pairs once (grey, undirected)
    return {"nodes": g.number_of_nodes(), "edges": len(into_c) + len(context), "ego_nodes": total,
            "predicted": class_names[int(pred[node])], "prob": float(prob[node].max()),
            "label": class_names[label] if label is not None else None,
            "top_source": int(name(int(src[top]))) if top is not None else None,
            "top_alpha": float(w[top]) if top is not None else float("nan")}
