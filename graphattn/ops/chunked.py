"""Chunked edge attention: the CSR-ordered autograd Function and its backward helpers shared by all edge paths."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from graphattn.ops.csr import EdgeCSR, to_csr
from graphattn.ops.padding import check_batch
from graphattn.utils.validation import check_bias_dtype, check_edge_index, check_tensor_shape

__all__ = ["SCORES", "fake_gradients", "eager_function", "check_edge_attention_args", "CHUNK_BYTES", "ChunkedEdgeAttention", "chunk_edges", "leaky_grad", "aggregate_backward",
           "score_backward", "edge_attention_autograd", "input_aliases", "differentiable_grads",
           "differentiable_backward"]

#: The edge score functions: scaled dot product and the additive (GATv2) form.
SCORES = ("dot", "additive")

#: Bytes of one chunk's per-edge ``(chunk, H, C)`` temporaries (bounds peak memory).
CHUNK_BYTES = 16 * 2**20


def chunk_edges(num_heads: int, channels: int, itemsize: int, budget: Optional[int] = None) -> int:
    """Edges per chunk so that one ``(chunk, H, C)`` temporary takes about ``budget`` bytes
    (default :data:`CHUNK_BYTES`), and at least 256."""
    budget = CHUNK_BYTES if budget is None else budget
    return max(256, budget // max(1, num_heads * channels * itemsize))


def leaky_grad(z: Tensor, slope: float) -> Tensor:
    """Derivative of ``LeakyReLU(z, slope)`` elementwise: 1 where ``z > 0``, else ``slope``."""
    return torch.where(z > 0, torch.ones_like(z), torch.full_like(z, slope))


def aggregate_backward(grad_out: Tensor, alpha: Tensor, v: Tensor, edge_value: Optional[Tensor],
                       csr: EdgeCSR, chunk: int, needs: Tuple[bool, bool, bool]):
    """Gradients of ``out_i = Σ_e α_e (v_j + ev_e)`` w.r.t. ``(α, v, edge_value)``, chunked.

    ``grad_out`` ``(N, H, C)``, ``alpha`` ``(E, H)`` in CSR order (the weights actually used).
    Shared by every autograd path that aggregates values over edges.
    """
    need_a, need_v, need_ev = needs
    ga = torch.empty_like(alpha) if need_a else None
    gv = torch.zeros_like(v) if need_v else None
    gev = torch.empty_like(edge_value) if need_ev else None
    row, col = csr.row, csr.col
    for s in range(0, csr.num_edges, chunk):
        r, c = row[s:s + chunk], col[s:s + chunk]
        go = grad_out[r]  # (chunk, H, C)
        if need_a:
            msg = v[c]
            if edge_value is not None:
                msg = msg + edge_value[s:s + chunk]
            ga[s:s + chunk] = (go * msg).sum(-1)
        if need_v or need_ev:
            gm = go * alpha[s:s + chunk, :, None]
            if need_v:
                gv.index_add_(0, c, gm)
            if need_ev:
                gev[s:s + chunk] = gm
    return ga, gv, gev


def score_backward(gs: Tensor, q: Tensor, k: Tensor, edge_key: Optional[Tensor], att: Optional[Tensor],
                   csr: EdgeCSR, score: str, scale: float, slope: float, chunk: int,
                   needs: Tuple[bool, bool, bool, bool]):
    """Gradients of the edge scores ``(E, H)`` w.r.t. ``(q, k, edge_key, att)``, chunked.

    ``gs`` is dL/ds in CSR order; ``needs`` says which of the four are wanted (None otherwise).
    Shared by every autograd path that computes dot or additive scores over edges.
    """
    need_q, need_k, need_ek, need_att = needs
    gq = torch.zeros_like(q) if need_q else None
    gk = torch.zeros_like(k) if need_k else None
    gek = torch.empty_like(edge_key) if need_ek else None
    gatt = torch.zeros_like(att) if need_att else None
    if not any(needs):
        return gq, gk, gek, gatt
    row, col = csr.row, csr.col
    for s in range(0, csr.num_edges, chunk):
        r, c = row[s:s + chunk], col[s:s + chunk]
        g = gs[s:s + chunk, :, None]  # (chunk, H, 1)
        kk = k[c]  # (chunk, H, C)
        if edge_key is not None:
            kk = kk + edge_key[s:s + chunk]
        if score == "dot":
            g = g * scale
            if need_q:
                gq.index_add_(0, r, g * kk)
            gkk = g * q[r] if (need_k or need_ek) else None
        else:
            z = q[r] + kk
            if need_att:
                gatt += (g * F.leaky_relu(z, slope)).sum(0)
            gkk = g * att * leaky_grad(z, slope)  # dL/dz, (chunk, H, C)
            if need_q:
                gq.index_add_(0, r, gkk)
        if need_k:
            gk.index_add_(0, c, gkk)
        if need_ek:
            gek[s:s + chunk] = gkk
    return gq, gk, gek, gatt


def edge_attention_autograd(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor],
                            edge_key: Optional[Tensor], edge_value: Optional[Tensor],
                            att: Optional[Tensor], csr: EdgeCSR, score: str, scale: float,
                            slope: float, keep: Optional[Tensor] = None, p_drop: float = 0.0) -> Tensor:
    """Edge attention in plain differentiable torch ops (per-edge tensors in CSR order).

    Materialises ``(E, H, C)`` messages, so it is only used to build the graph of a
    *second-order* backward (``create_graph=True``) of the chunked and fused paths, whose
    first-order backward passes are hand-written. ``keep`` is the ``(E, H)`` dropout mask.
    """
    row, col = csr.row, csr.col
    N, H = q.shape[:2]
    E = row.numel()
    kk = k[col]  # (E, H, C)
    if edge_key is not None:
        kk = kk + edge_key
    if score == "dot":
        s = (q[row] * kk).sum(-1) * scale  # (E, H)
    else:
        s = (F.leaky_relu(q[row] + kk, slope) * att).sum(-1)  # (E, H)
    if bias is not None:
        s = s + bias
    with torch.no_grad():  # the shift cancels in the softmax: a constant for autograd
        m = s.new_full((N, H), float("-inf")).scatter_reduce_(0, row[:, None].expand(E, H), s, "amax")
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    ex = (s - m[row]).exp()  # (E, H)
    denom = ex.new_zeros(N, H).index_add(0, row, ex)
    alpha = ex / denom.clamp_min(torch.finfo(ex.dtype).tiny)[row]
    if keep is not None:
        alpha = alpha * keep / (1.0 - p_drop)
    msg = v[col]  # (E, H, C')
    if edge_value is not None:
        msg = msg + edge_value
    return msg.new_zeros(N, H, v.size(-1)).index_add(0, row, msg * alpha[..., None])  # (N, H, C')


def fake_gradients(q: Tensor, v: Tensor, num_edges, bias: Optional[Tensor], edge_key: Optional[Tensor],
                   edge_value: Optional[Tensor], shared: bool, needs) -> Tuple[Tensor, ...]:
    """Shapes of a fused backward's six gradients (q, k, v, bias, edge key, edge value) for the fake
    (meta) implementations of the C++ and Triton backward ops: empty ``(0,)`` where not wanted.
    ``needs``: ``(need_q, need_kv, need_bias, need_ek, need_ev)``; the value width is ``v``'s."""
    N, H, C = q.shape
    CV, E = v.size(-1), num_edges
    need_q, need_kv, need_bias, need_ek, need_ev = needs

    def grad(wanted, *shape):
        return q.new_empty(shape if wanted else (0,))

    return (grad(need_q, N, H, C), grad(need_kv, N, H, C), grad(need_kv, N, H, CV),
            grad(need_bias and bias is not None, E, H), grad(need_ek and edge_key is not None, E, H, C),
            grad(need_ev and edge_value is not None and not shared, E, H, CV))


def eager_function(name: str, forward, setup_context, gradients) -> type:
    """An ``autograd.Function`` running a custom op's ``forward``, ``setup_context`` and autograd
    formula ``gradients(ctx, dout)`` directly: eager calls skip the op's per-call dispatch (it
    refills the op's schema on every call), compiled calls take the op itself."""
    def forward_(ctx, *inputs):
        output = forward(*inputs)
        setup_context(ctx, inputs, output)
        return output

    def backward_(ctx, dout, *_grads_of_other_outputs):  # lse, weights / float32 copy: not differentiable
        return gradients(ctx, dout)

    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward_),
                                                    "backward": staticmethod(backward_)})


def input_aliases(inputs) -> Tuple[int, ...]:
    """For each input, the index of the first input that is the same tensor (``k is v``...)."""
    return tuple(next(j for j in range(i + 1) if inputs[j] is t) if t is not None else i
                 for i, t in enumerate(inputs))


def differentiable_grads(inputs, needs, grad_out: Tensor, recompute, aliases):
    """Gradients of ``recompute()`` w.r.t. the ``inputs`` flagged in ``needs``, themselves
    differentiable (``create_graph=True``): the double-backward route of the autograd
    Functions here and (through :func:`differentiable_backward`) of the fused ones. An input
    passed in several slots (``aliases`` from :func:`input_aliases`) gets its whole gradient in
    its first slot only (autograd sums the slots)."""
    want = [False] * len(inputs)
    for i, n in enumerate(needs):
        if n and inputs[i] is not None:
            want[aliases[i]] = True
    with torch.enable_grad():
        out = recompute()
    idx = [i for i, w in enumerate(want) if w]
    grads = [None] * len(inputs)
    if idx:
        got = torch.autograd.grad(out, [inputs[i] for i in idx], grad_out, create_graph=True,
                                  allow_unused=True)
        for i, g in zip(idx, got):
            grads[i] = g if g is not None else torch.zeros_like(inputs[i])
    return grads


def differentiable_backward(inputs, needs, dout: Tensor, rowptr: Tensor, col: Tensor, eid: Optional[Tensor],
                            scale: float, shared: bool, aliases):
    """Gradients of a fused ``score="dot"`` attention as differentiable functions of the inputs
    and ``dout`` (plain torch ops, ``(E, H, C)`` temporaries): what ``create_graph=True`` needs
    for second derivatives. The double-backward route of the fused C++ and Triton custom ops.
    ``inputs`` = ``(q, k, v, bias, edge_key, edge_value)`` with ``needs`` their
    ``needs_input_grad``; the graph is given by its CSR arrays ``rowptr``, ``col`` and ``eid``
    (CSR position -> edge id: the per-edge tensors are in input order; None: in CSR order);
    ``shared``: one tensor as edge key and value (``edge_value`` is then None);
    ``aliases`` from :func:`input_aliases`."""
    q, k, v, bias, edge_key, edge_value = inputs
    N = rowptr.numel() - 1
    row = torch.repeat_interleave(torch.arange(N, device=col.device), rowptr.diff(),
                                  output_size=col.numel())  # (E,) target of each CSR position
    perm = eid if eid is not None else torch.arange(col.numel(), device=col.device)
    csr = EdgeCSR(N, perm, rowptr, row, col)
    ev = edge_key if shared else edge_value

    def to_csr_order(t):
        return t if t is None or eid is None else t[eid]

    def recompute():
        return edge_attention_autograd(q, k, v, to_csr_order(bias), to_csr_order(edge_key),
                                       to_csr_order(ev), None, csr, "dot", scale, 0.0)

    return differentiable_grads(tuple(inputs), needs, dout, recompute, aliases)


class ChunkedEdgeAttention(torch.autograd.Function):
    """Softmax attention over CSR-ordered edges, chunked, with a recomputing backward.

    Saved for backward: inputs and the ``(E, H)`` attention weights (and dropout mask);
    never the ``(E, H, C)`` messages. The first-order backward is hand-written and chunked;
    under ``create_graph=True`` it is rebuilt from :func:`edge_attention_autograd`, so second
    derivatives (gradient penalties) are exact, at the cost of ``(E, H, C)`` temporaries.
    """

    @staticmethod
    def forward(ctx, q, k, v, bias, edge_key, edge_value, att, csr: EdgeCSR, score: str,
                scale: float, slope: float, p_drop: float, chunk: int):
        row, col = csr.row, csr.col
        N, H, C = q.shape
        E = col.numel()
        scores = q.new_empty(E, H)
        for s in range(0, E, chunk):  # scores (E, H), chunk by chunk
            r, c = row[s:s + chunk], col[s:s + chunk]
            kk = k[c]  # (chunk, H, C)
            if edge_key is not None:
                kk = kk + edge_key[s:s + chunk]
            if score == "dot":
                scores[s:s + chunk] = (q[r] * kk).sum(-1) * scale
            else:
                scores[s:s + chunk] = (F.leaky_relu(q[r] + kk, slope) * att).sum(-1)
        if bias is not None:
            scores += bias
        # Stable segment softmax: subtract the per-target max; -inf-only rows give 0.
        rowmax = scores.new_full((N, H), float("-inf"))
        rowmax.scatter_reduce_(0, row[:, None].expand(E, H), scores, "amax")
        rowmax = torch.where(torch.isfinite(rowmax), rowmax, torch.zeros_like(rowmax))
        alpha = scores.sub_(rowmax[row]).exp_()  # (E, H), reuses the scores buffer
        denom = q.new_zeros(N, H).index_add_(0, row, alpha)
        alpha.div_(denom.clamp_min(torch.finfo(alpha.dtype).tiny)[row])
        keep = None
        alpha_used = alpha
        if p_drop > 0.0:
            keep = torch.rand_like(alpha) >= p_drop  # (E, H) bool
            alpha_used = alpha * keep / (1.0 - p_drop)
        out = q.new_zeros(N, H, v.size(-1))  # (N, H, C'): v may have other channels than q, k
        for s in range(0, E, chunk):
            r, c = row[s:s + chunk], col[s:s + chunk]
            msg = v[c]  # (chunk, H, C')
            if edge_value is not None:
                msg = msg + edge_value[s:s + chunk]
            out.index_add_(0, r, msg * alpha_used[s:s + chunk, :, None])
        ctx.save_for_backward(q, k, v, bias, edge_key, edge_value, att, alpha, keep)
        ctx.csr, ctx.score, ctx.scale, ctx.slope, ctx.p_drop, ctx.chunk = csr, score, scale, slope, p_drop, chunk
        ctx.shared = edge_key is not None and edge_value is edge_key
        ctx.aliases = input_aliases((q, k, v, bias, edge_key, edge_value, att))
        ctx.mark_non_differentiable(alpha)
        return out, alpha

    @staticmethod
    def backward(ctx, grad_out, _grad_alpha):
        q, k, v, bias, edge_key, edge_value, att, alpha, keep = ctx.saved_tensors
        row, chunk, score = ctx.csr.row, ctx.chunk, ctx.score
        need_q, need_k, need_v, need_b, need_ek, need_ev, need_att = ctx.needs_input_grad[:7]
        if torch.is_grad_enabled():  # create_graph=True: differentiable recomputation
            ev = edge_key if ctx.shared else edge_value
            grads = differentiable_grads(
                (q, k, v, bias, edge_key, edge_value, att), ctx.needs_input_grad[:7], grad_out,
                lambda: edge_attention_autograd(q, k, v, bias, edge_key, ev, att, ctx.csr, score,
                                                ctx.scale, ctx.slope, keep, ctx.p_drop),
                ctx.aliases)
            return (*grads, None, None, None, None, None, None)
        grad_out = grad_out.contiguous()
        alpha_used = alpha if keep is None else alpha * keep / (1.0 - ctx.p_drop)
        g_alpha, gv, gev = aggregate_backward(grad_out, alpha_used, v, edge_value, ctx.csr, chunk,
                                              (True, need_v, need_ev))  # g_alpha = dL/d alpha_used
        if keep is not None:
            g_alpha = g_alpha * keep / (1.0 - ctx.p_drop)
        # Softmax backward: gs = α (gα − Σ_j α gα).
        dot = q.new_zeros(q.size(0), alpha.size(1)).index_add_(0, row, alpha * g_alpha)  # (N, H)
        gs = alpha * (g_alpha - dot[row])  # (E, H)
        gq, gk, gek, gatt = score_backward(gs, q, k, edge_key, att, ctx.csr, score, ctx.scale, ctx.slope,
                                           chunk, (need_q, need_k, need_ek, need_att))
        gb = gs if need_b else None
        return gq, gk, gv, gb, gek, gev, gatt, None, None, None, None, None, None


def check_edge_attention_args(q: Tensor, k: Tensor, v: Tensor, edge_index: Optional[Tensor],
                              csr: Optional[EdgeCSR], *, batch: Optional[Tensor], bias: Optional[Tensor],
                              edge_key: Optional[Tensor], edge_value: Optional[Tensor], score: str,
                              att: Optional[Tensor], dropout: float, what: str,
                              check_range: bool = True) -> EdgeCSR:
    """Check the arguments of an edge attention call and return the graph's CSR view (built from
    ``edge_index`` when ``csr`` is None); ``ValueError`` naming the bad argument.

    Shapes: ``q``, ``k`` ``(N, H, C)``, ``v`` ``(N, H, C_v)``, ``batch`` ``(N,)``, ``bias`` ``(E, H)``,
    ``edge_key`` ``(E, H, C)``, ``edge_value`` ``(E, H, C_v)``, ``att`` ``(H, C)`` (additive score).
    ``check_range=False`` leaves the id range to :func:`~graphattn.ops.csr.to_csr`, which checks it
    once when it builds a graph's cached view."""
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    check_tensor_shape(q, (None, None, None), "q")
    N, H, C = q.shape
    check_tensor_shape(k, (N, H, C), "k")
    check_tensor_shape(v, (N, H, None), "v")
    if batch is not None:
        check_batch(batch, N, check_range=False)  # type and shape; ids where it is used
    if csr is None:
        if edge_index is None:
            raise ValueError(f"{what} needs edge_index or csr")
        check_edge_index(edge_index, N, check_range=check_range)
        csr = to_csr(edge_index, N)
    elif csr.num_nodes != N:
        raise ValueError(f"csr has {csr.num_nodes} nodes but q has {N}")
    E = csr.num_edges
    if bias is not None:
        check_tensor_shape(bias, (E, H), "bias")
        check_bias_dtype(bias, "bias")
    for name, t, last in (("edge_key", edge_key, C), ("edge_value", edge_value, v.size(-1))):
        if t is not None:
            check_tensor_shape(t, (E, H, last), name)
    if score == "additive":
        if att is None:
            raise ValueError("score='additive' needs att of shape (H, C)")
        check_tensor_shape(att, (H, C), "att")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    return csr
