"""Attention pictures for social graphs: a node's ego-graph, edges coloured by attention.

:func:`last_layer_attention` runs a :class:`~graphattn.NodeClassifier` once and keeps the
attention weights of its last block (mean over heads); :func:`draw_ego_attention` draws the
``hops``-hop ego-graph of one node with networkx + matplotlib: every edge j -> centre
coloured and thickened by α_j,centre (how much the centre listens to j; a colour bar), drawn
above the nodes, the other edges of the ego-graph in light grey, nodes coloured by predicted
class (a legend), the centre outlined, only the centre and the nodes it attends to most labelled.
matplotlib is imported only here, inside the functions.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn
from torch_geometric.utils import k_hop_subgraph

__all__ = ["last_layer_attention", "ego_attention_figure", "draw_ego_attention"]

#: colour map of the attention arrows, and their drawing order: above the nodes (networkx: 2),
#: under the labels
ATTENTION_CMAP, ARROW_ZORDER = "viridis", 3
#: colour map of the nodes' predicted values (regression models)
VALUE_CMAP = "coolwarm"


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


def _top_sources(edge_index: Tensor, alpha: Tensor, node: int, drawn: Tensor, k: int) -> List[int]:
    """The ``k`` nodes of ``drawn`` (other than ``node``) that ``node`` attends to most, highest α first."""
    into = (edge_index[1] == node) & (edge_index[0] != node) & torch.isin(edge_index[0], drawn)
    order = torch.argsort(alpha[into], descending=True, stable=True)
    return list(dict.fromkeys(int(j) for j in edge_index[0, into][order].tolist()))[:max(int(k), 0)]


def _draw_graph(ax, g, pos, node: int, colour, labelled: List[int], name, cmap_e) -> None:
    """Nodes coloured by ``colour(row)`` (their predicted class or value; the centre larger, outlined),
    grey context edges, the centre's incoming edges as arrows above the nodes (coloured by α, never
    hidden under a node), and labels on ``labelled`` only, above everything."""
    import networkx as nx  # optional dependency, with matplotlib

    nodes = list(g.nodes)
    sizes = [420 if n == node else 160 for n in nodes]
    nx.draw_networkx_nodes(g, pos, nodelist=nodes, ax=ax, node_size=sizes,
                           node_color=[colour(n) for n in nodes],
                           edgecolors=["black" if n == node else "white" for n in nodes], linewidths=2)
    context = sorted({tuple(sorted(e)) for e in g.edges if node not in e})  # undirected, grey
    nx.draw_networkx_edges(g, pos, edgelist=context, ax=ax, edge_color="0.8", width=0.6, arrows=False)
    into = [e for e in g.edges if e[1] == node]  # what the centre listens to
    weights = [g.edges[e]["alpha"] for e in into]
    vmax = max(weights, default=1.0) or 1.0
    if into:
        arrows = nx.draw_networkx_edges(g, pos, edgelist=into, ax=ax, edge_color=weights, edge_cmap=cmap_e,
                                        edge_vmin=0.0, edge_vmax=vmax, arrows=True, arrowsize=12,
                                        width=[1.0 + 5.0 * w / vmax for w in weights], node_size=sizes,
                                        nodelist=nodes)
        for a in arrows:  # networkx puts arrows under the nodes (zorder 1 < 2)
            a.set_zorder(ARROW_ZORDER)
    texts = nx.draw_networkx_labels(g, pos, labels={n: name(n) for n in labelled if n in g}, font_size=7, ax=ax,
                                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.7})
    for t in texts.values():
        t.set_zorder(ARROW_ZORDER + 1)


def _class_legend(ax, classes: List[int], class_names: List[str], cmap, centre: str) -> None:
    """Legend: one marker per predicted class in the picture, and the outlined centre."""
    from matplotlib.lines import Line2D  # optional dependency

    handles = [Line2D([], [], marker="o", linestyle="", markersize=8, markerfacecolor=cmap(c % 10),
                      markeredgecolor="white", label=class_names[c]) for c in classes]
    handles.append(Line2D([], [], marker="o", linestyle="", markersize=10, markerfacecolor="none",
                          markeredgecolor="black", markeredgewidth=2, label=f"node {centre} (centre)"))
    ax.legend(handles=handles, title="predicted class", loc="upper center", bbox_to_anchor=(0.5, 0.0),
              ncol=min(len(handles), 4), fontsize=8, title_fontsize=8, frameon=False)  # below: hides no node


def _value_colours(fig, ax, values: Tensor, subset: Tensor, value_name: str):
    """Node colours by predicted value (a colour bar over the drawn nodes' range): ``colour(row)``."""
    import matplotlib  # optional dependency
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    drawn = values[subset]
    norm = Normalize(float(drawn.min()), float(drawn.max()) if float(drawn.max()) > float(drawn.min())
                     else float(drawn.min()) + 1.0)
    cmap = matplotlib.colormaps[VALUE_CMAP]
    fig.colorbar(ScalarMappable(norm, cmap), ax=ax, label=f"predicted {value_name}", location="left")
    return lambda n: cmap(norm(float(values[n])))


def _prediction(data, node: int, logits: Tensor, class_names: List[str], value_name: Optional[str]):
    """``(predicted, p, label, title text)`` of the centre: its class and probability, or its value
    (``p`` None) when ``value_name`` is given; ``label`` the file's class / value, None when missing."""
    if value_name is not None:
        values = logits.float().view(logits.size(0), -1)[:, 0]
        y = getattr(data, "y", None)
        true = float(y.view(y.size(0), -1)[node, 0]) if y is not None and y.is_floating_point() else float("nan")
        label = None if true != true else true
        return (float(values[node]), None, label, f"predicted {value_name} {float(values[node]):.4g}"
                + (f", label {label:.4g}" if label is not None else ""))
    prob = torch.softmax(logits.float(), -1)
    pred, cls = int(prob[node].argmax()), _label(data, node, class_names)
    label = class_names[cls] if cls is not None else None
    return (class_names[pred], float(prob[node].max()), label,
            f"predicted {class_names[pred]} (p={float(prob[node].max()):.2f})"
            + (f", label {label}" if label is not None else ""))


def ego_attention_figure(data, node: int, edge_index: Tensor, alpha: Tensor, logits: Tensor,
                         class_names: List[str], hops: int = 1, max_nodes: int = 60, top_k: int = 10,
                         value_name: Optional[str] = None):
    """``(figure, summary)``: the matplotlib ``Figure`` of :func:`draw_ego_attention` and its
    summary dict (``"labelled"``: the node rows labelled, the centre first). With ``value_name``
    (a regression model) ``logits`` are the predicted values ``(N, 1)``: nodes are coloured by value."""
    import matplotlib  # optional dependency (graphattn[viz])
    import networkx as nx
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    node, alpha = _check_ego_inputs(data, node, edge_index, alpha)
    subset, mask, total = _ego_subgraph(node, edge_index, alpha, int(data.num_nodes), hops, max_nodes)
    pred = torch.softmax(logits.float(), -1).argmax(-1) if value_name is None else None
    ids = getattr(data, "node_id", None)
    name = (lambda n: str(int(ids[n]))) if ids is not None else str  # noqa: E731
    g = nx.DiGraph()
    g.add_nodes_from(subset.tolist())
    for (j, i), w in zip(edge_index[:, mask].t().tolist(), alpha[mask].tolist()):
        if j != i:
            g.add_edge(j, i, alpha=w)
    fig = Figure(figsize=(7, 6))
    ax = fig.add_subplot()
    pos = nx.spring_layout(g.to_undirected(), seed=0)
    cmap = matplotlib.colormaps["tab10"]
    top = _top_sources(edge_index, alpha, node, subset, top_k)
    colour = ((lambda n: cmap(int(pred[n]) % 10)) if pred is not None  # noqa: E731
              else _value_colours(fig, ax, logits.float().view(logits.size(0), -1)[:, 0], subset, value_name))
    _draw_graph(ax, g, pos, node, colour, [node] + top, name, matplotlib.colormaps[ATTENTION_CMAP])
    if pred is not None:
        _class_legend(ax, sorted({int(pred[n]) for n in g.nodes}), class_names, cmap, name(node))
    into = [g.edges[e]["alpha"] for e in g.edges if e[1] == node]
    if into:
        vmax = max(into) or 1.0
        fig.colorbar(ScalarMappable(Normalize(0.0, vmax), ATTENTION_CMAP), ax=ax,
                     label=f"attention α_j→{name(node)} (last layer, mean over heads)")
    predicted, p, label, said = _prediction(data, node, logits, class_names, value_name)
    loop = (edge_index[0] == node) & (edge_index[1] == node)
    own = float(alpha[loop].sum()) if bool(loop.any()) else 0.0  # the centre's attention to itself
    c = name(node)
    ax.set_title(f"node {c}: {said}\n{hops}-hop ego-graph"
                 + (f" ({subset.numel()} of its {total} nodes: the most attended first)"
                    if total > subset.numel() else "")
                 + f"; arrows j→{c} coloured by how much {c} attends to j"
                 + f"\narrows drawn: Σα = {sum(into):.2f}; {c} to itself: α = {own:.2f}"
                 + f"\nlabelled: node {c} and the {len(top)} it attends to most", fontsize=10)
    ax.axis("off")
    into_all = edge_index[1] == node
    src, w = edge_index[0, into_all], alpha[into_all]
    best = int(torch.argmax(w)) if w.numel() else None
    context = {tuple(sorted(e)) for e in g.edges if node not in e}
    # what the picture shows: the arrows into the centre and the other pairs once (grey, undirected)
    return fig, {"nodes": g.number_of_nodes(), "edges": len(into) + len(context), "ego_nodes": total,
                 "predicted": predicted, "prob": p, "label": label,
                 "labelled": [node] + top,
                 "top_source": int(name(int(src[best]))) if best is not None else None,
                 "top_alpha": float(w[best]) if best is not None else float("nan"), "self_alpha": own,
                 "drawn_alpha": float(sum(into))}


def _label(data, node: int, class_names: List[str]) -> Optional[int]:
    """The node's class id, None when unlabelled (-1) or the labels are not one class per node."""
    y = getattr(data, "y", None)
    label = int(y[node]) if y is not None and y.dim() == 1 else None  # (N,) class ids; (N, C) is not one label
    return label if label is not None and 0 <= label < len(class_names) else None  # -1: unlabelled node


def draw_ego_attention(data, node: int, edge_index: Tensor, alpha: Tensor, logits: Tensor,
                       class_names: List[str], out, hops: int = 1, max_nodes: int = 60,
                       top_k: int = 10, value_name: Optional[str] = None) -> Dict[str, Any]:
    """Draw the ego-graph of ``node`` (a row of ``data``; at most ``max_nodes`` nodes: the
    centre's strongest sources first) to the PNG ``out``; returns a small summary dict. Nodes
    are coloured by predicted class (a legend names them); the arrows j -> centre, coloured by
    α (a colour bar), are drawn above the nodes; only the centre and the ``top_k`` nodes it
    attends to most are labelled, with ``data.node_id`` (the ids of the input files) when present.
    ``value_name`` (a regression model; ``logits`` its predicted values ``(N, 1)``): nodes coloured by
    predicted value (a second colour bar), the summary's ``predicted``/``label`` are numbers, ``prob`` None."""
    fig, info = ego_attention_figure(data, node, edge_index, alpha, logits, class_names, hops, max_nodes, top_k,
                                     value_name)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    return info
