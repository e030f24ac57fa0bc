"""Learnable global tokens: extra nodes that see, and are seen by, every node of their graph."""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn

from graphattn.ops.padding import check_batch
from graphattn.utils.memo import recall, remember
from graphattn.utils.validation import check_edge_index, check_int, check_row_index, mark_index_checked

__all__ = ["GlobalTokens", "TokenGraph"]


class TokenGraph(NamedTuple):
    """A batch with global tokens appended after the ``N`` original nodes.

    ``x`` is ``(N + B*G, C)``; token t of graph b is node ``N + b*G + t``. ``edge_index``
    holds the original edges followed by the token edges; ``edge_attr`` likewise (token
    edges get a learned vector, if edge features are used); ``batch`` is ``(N + B*G,)``.
    """

    x: Tensor
    edge_index: Tensor
    edge_attr: Optional[Tensor]
    batch: Tensor
    num_nodes: int
    num_graphs: int
    edge_attr_index: Optional[Tensor] = None  # (E',) when edge_attr is a table of rows


class GlobalTokens(nn.Module):
    r"""Appends ``num_tokens`` learnable global nodes to every graph of a batch
    (Longformer/BigBird-style global attention on graphs; cf. the virtual node of
    Gilmer et al. 2017 and Exphormer's virtual nodes).

    Token t of graph b gets edges to and from every node of graph b (and to the other
    tokens of b, itself included) and never to another graph. Tokens are just nodes and
    edges, so any edge attention handles them; with two attention layers every node sees
    every node of its graph through the tokens.

    Args:
        channels (int): feature size C of the nodes (and tokens).
        num_tokens (int, default 1): G, tokens per graph.
        edge_dim (int, optional): size D of edge features; token edges then get one of two
            learned vectors (node->token, token->node/token).

    Inputs are checked: ``edge_index`` ids in ``[0, N)``, ``batch`` ids in ``[0, num_graphs)``
    (``num_graphs`` may exceed ``batch.max() + 1``: the last graphs are then empty and
    hold only their tokens), ``edge_attr`` with one row per edge (``(E,)`` is read as
    ``(E, 1)`` when ``edge_dim=1``).

    ``edge_attr_index`` (optional, ``(E,)``): ``edge_attr`` is a table ``(U, D)`` of distinct
    rows and edge e uses row ``edge_attr_index[e]``; the output then keeps that form: the
    table gains the two token rows and :attr:`TokenGraph.edge_attr_index` covers every edge.

    ``check_range=False`` (keyword): the caller has already range-checked ``edge_index`` and
    ``batch`` (against ``num_graphs``); only their types and shapes are checked then, with no
    device sync. (A model's forward checks once and passes it; standalone use keeps the
    default.) The output ``edge_index`` / ``edge_attr_index`` are recorded as valid, so the
    attention layers do not scan them again (:func:`~graphattn.utils.validation.mark_index_checked`).

    Shapes:
        - input: x ``(N, C)``, edge_index ``(2, E)``, batch ``(N,)`` (None = one graph),
          edge_attr ``(E, D)``
        - output: :class:`TokenGraph` with x ``(N + B*G, C)``, edge_index
          ``(2, E + 2*N*G + B*G*G)``.
    """

    def __init__(self, channels: int, num_tokens: int = 1, edge_dim: Optional[int] = None):
        super().__init__()
        channels, num_tokens = check_int("channels", channels, 1), check_int("num_tokens", num_tokens, 1)
        if edge_dim is not None:
            edge_dim = check_int("edge_dim", edge_dim, 1)
        self.channels, self.num_tokens, self.edge_dim = channels, num_tokens, edge_dim
        self.tokens = nn.Parameter(torch.empty(num_tokens, channels))
        self.edge_emb = nn.Parameter(torch.empty(2, edge_dim)) if edge_dim is not None else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.tokens, std=0.02)
        if self.edge_emb is not None:
            nn.init.normal_(self.edge_emb, std=0.02)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
                edge_attr: Optional[Tensor] = None, num_graphs: Optional[int] = None, *,
                edge_attr_index: Optional[Tensor] = None, check_range: bool = True) -> TokenGraph:
        if x.dim() != 2 or x.size(1) != self.channels:
            raise ValueError(f"x must have shape (N, {self.channels}), got {tuple(x.shape)}")
        N, dev = x.size(0), x.device
        check_edge_index(edge_index, N, check_range=check_range)  # an id >= N would silently hit a token
        E = edge_index.size(1)
        if batch is None:  # one graph (or num_graphs, the others empty): nothing to read
            B = num_graphs = 1 if num_graphs is None else check_int("num_graphs", num_graphs, 1 if N else 0)
        else:
            B = num_graphs = check_batch(batch, N, num_graphs, check_range=check_range or num_graphs is None)
        edge_attr, edge_attr_index = self._check_edge_attr(edge_attr, edge_attr_index, E)
        edge_index, batch, kinds = self.token_graph(edge_index, batch, N, B, dev)
        x = torch.cat([x, self.tokens.to(x.dtype).repeat(B, 1)], dim=0)  # (N + B*G, C)
        if self.edge_emb is not None:
            if edge_attr_index is not None:  # table form: two more rows, index per edge
                edge_attr_index = torch.cat([edge_attr_index.to(dev), kinds + edge_attr.size(0)])
                edge_attr = torch.cat([edge_attr, self.edge_emb.to(edge_attr.dtype)], dim=0)
                # built from checked parts: the attention layers' row checks skip the scan
                mark_index_checked(edge_attr_index, edge_attr.size(0))
            else:
                edge_attr = torch.cat([edge_attr, self.edge_emb[kinds].to(edge_attr.dtype)], dim=0)
        return TokenGraph(x, edge_index, edge_attr, batch, N, B, edge_attr_index)

    def token_graph(self, edge_index: Tensor, batch: Optional[Tensor], N: int, B: int,
                    device) -> Tuple[Tensor, Tensor, Tensor]:
        """The structure of the batch with tokens: ``(edge_index (2, E + 2*N*G + B*G*G), batch
        (N + B*G,), kinds (2*N*G + B*G*G,))``, ``kinds`` 0 for node->token and 1 for the other token
        edges. It depends on the graph only, so it is built once per ``(edge_index, batch)`` pair
        of tensors and remembered for them (:mod:`graphattn.utils.memo`): a second call with the
        same graph returns the same tensors, whose CSR view the attention layers have cached.
        ``edge_index`` and ``batch`` must be checked (ids in ``[0, N)`` and ``[0, B)``)."""
        G = self.num_tokens
        tag = ("global token graph", N, B, G, str(device))  # no int(): a traced size must stay symbolic
        hit = recall(tag, edge_index, batch)
        if hit is not None:
            return hit
        given = batch
        batch = torch.zeros(N, dtype=torch.long, device=device) if batch is None else batch.long()
        nodes = torch.arange(N, device=device)
        # token ids of every node's graph: (N, G)
        tok_of_node = N + batch[:, None] * G + torch.arange(G, device=device)[None, :]
        node_rep = nodes[:, None].expand(N, G).reshape(-1)
        tok_rep = tok_of_node.reshape(-1)
        # tokens of the same graph attend to each other (and themselves): (B*G*G,) pairs
        tok_ids = N + torch.arange(B * G, device=device).view(B, G)
        tt_src = tok_ids[:, None, :].expand(B, G, G).reshape(-1)
        tt_dst = tok_ids[:, :, None].expand(B, G, G).reshape(-1)
        new_edges = torch.stack([
            torch.cat([node_rep, tok_rep, tt_src]),  # sources: node->token, token->node, token->token
            torch.cat([tok_rep, node_rep, tt_dst]),
        ])
        out = torch.cat([edge_index.to(device), new_edges], dim=1)
        # Built from checked parts: the attention layers' CSR build skips the range scan.
        mark_index_checked(out, N + B * G)
        out_batch = torch.cat([batch, torch.arange(B, device=device).repeat_interleave(G)])
        kinds = torch.cat([torch.zeros(N * G, dtype=torch.long, device=device),
                           torch.ones(N * G + B * G * G, dtype=torch.long, device=device)])
        return remember(tag, (out, out_batch, kinds), edge_index, given)

    def _check_edge_attr(self, edge_attr: Optional[Tensor], edge_attr_index: Optional[Tensor],
                         E: int) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """Validate the edge features of E edges: ``(E, D)`` (``(E,)`` when D = 1), or a
        ``(U, D)`` table with ``edge_attr_index`` ``(E,)``. Returns them as 2-D / long."""
        if self.edge_emb is None:
            if edge_attr_index is not None:
                raise ValueError("edge_attr_index needs a GlobalTokens built with edge_dim")
            if edge_attr is not None:
                raise ValueError("edge_attr given, but GlobalTokens was built without edge_dim "
                                 "(token edges would have no features): pass edge_dim=D")
            return None, None
        D = self.edge_dim
        if edge_attr is None:
            raise ValueError(f"edge_attr is required: GlobalTokens was built with edge_dim={D}")
        if edge_attr.dim() == 1 and D == 1:
            edge_attr = edge_attr[:, None]  # (E,) -> (E, 1), as GraphSelfAttention accepts it
        if edge_attr.dim() != 2 or edge_attr.size(1) != D:
            raise ValueError(f"edge_attr must have shape (E, {D}), got {tuple(edge_attr.shape)}")
        if edge_attr_index is not None:
            check_row_index(edge_attr_index, E, edge_attr.size(0), "edge_attr_index")  # cached when built valid
            return edge_attr, edge_attr_index.long()
        if edge_attr.size(0) != E:
            raise ValueError(f"edge_attr has {edge_attr.size(0)} rows but edge_index has {E} edges "
                             f"(edge_attr must have shape ({E}, {D}))")
        return edge_attr, None

    def split(self, x: Tensor, num_nodes: int) -> Tuple[Tensor, Tensor]:
        """Inverse step: ``(N + B*G, C)`` -> node states ``(N, C)`` and tokens ``(B, G, C)``."""
        tokens = x[num_nodes:]
        return x[:num_nodes], tokens.view(-1, self.num_tokens, x.size(-1))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, num_tokens={self.num_tokens})"
