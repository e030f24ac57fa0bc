"""The Triton kernels of :mod:`graphattn.ops.fused_triton` (imported only on first use there).

Tensors are ``(N, H, W)`` row-major: row ``(n, h)`` starts at ``(n * H + h) * W``. Per-edge
tensors (bias ``(E, H)``, edge key ``(E, H, C)``, edge value ``(E, H, CV)``) are in the caller's
edge order and read through ``EID`` (CSR position -> edge id). One program per (node, head).
The kernels and their helpers are module globals: Triton before 3.4 resolves no closure
variables, and it refuses chained ``or`` on constexprs (hence ``(A or B) or C``).

Dtypes: q, k, v, the per-edge tensors, dout and every output or gradient are in the input
dtype (float32, float16 or bfloat16); every load is widened to float32 (:func:`_rows`), so
dot products, the online softmax and the gradient sums accumulate in float32, and stores
cast back (:func:`_store`). The log-sum-exp and ``DELTA`` are float32.
"""
import triton
import triton.language as tl


@triton.jit
def _rows(PTR, idx, h, H, W, ow, me, mw):
    """``PTR[idx, h, :]`` for a block of row ids ``idx`` (masked rows/channels read 0)."""
    return tl.load(PTR + (idx[:, None] * H + h) * W + ow[None, :], mask=me[:, None] & mw[None, :],
                   other=0.0).to(tl.float32)


@triton.jit
def _store(PTR, offsets, x, mask):
    """``x`` (float32) stored at ``PTR + offsets`` in ``PTR``'s dtype."""
    tl.store(PTR + offsets, x.to(PTR.dtype.element_ty), mask=mask)


@triton.jit
def _edge_extras(kk, vv, EK, EV, eid, h, H, C, CV, oc, mc, ov, mv, me,
                 HAS_EK: tl.constexpr, HAS_EV: tl.constexpr):
    """Keys / values of a block of edges plus their edge key / value."""
    if HAS_EK:
        kk = kk + _rows(EK, eid, h, H, C, oc, me, mc)
    if HAS_EV:
        vv = vv + _rows(EV, eid, h, H, CV, ov, me, mv)
    return kk, vv


@triton.jit
def _add_bias(s, B, eid, h, H, me, HAS_B: tl.constexpr):
    """Scores plus the edges' bias ``B[eid, h]`` (when there is one)."""
    if HAS_B:
        s = s + tl.load(B + eid * H + h, mask=me, other=0.0).to(tl.float32)
    return s


@triton.jit
def _program(PTR, H, C, CV, BLOCK_C: tl.constexpr, BLOCK_CV: tl.constexpr):
    """This program's (node, head), the node's edge range ``PTR[n]..PTR[n+1]`` and the channel
    offsets / masks of keys (C) and values (CV)."""
    pid = tl.program_id(0).to(tl.int64)
    n = pid // H
    h = pid % H
    oc = tl.arange(0, BLOCK_C)
    ov = tl.arange(0, BLOCK_CV)
    return n, h, tl.load(PTR + n), tl.load(PTR + n + 1), oc, oc < C, ov, ov < CV


@triton.jit
def _target_block(q, K, V, B, EK, EV, EID, COL, e0, end, h, H, C, CV, oc, mc, ov, mv, scale,
                  HAS_B: tl.constexpr, HAS_EK: tl.constexpr, HAS_EV: tl.constexpr, BLOCK_E: tl.constexpr):
    """One block of a target's incoming edges (CSR positions ``e0..``): edge mask, edge ids,
    keys and values (with edge key / value), and the scores ``scale·q·k + bias``."""
    oe = e0 + tl.arange(0, BLOCK_E)
    me = oe < end
    j = tl.load(COL + oe, mask=me, other=0)
    eid = oe
    if (HAS_B or HAS_EK) or HAS_EV:
        eid = tl.load(EID + oe, mask=me, other=0)
    kk, vv = _edge_extras(_rows(K, j, h, H, C, oc, me, mc), _rows(V, j, h, H, CV, ov, me, mv),
                          EK, EV, eid, h, H, C, CV, oc, mc, ov, mv, me, HAS_EK, HAS_EV)
    s = _add_bias(tl.sum(kk * q[None, :], axis=1) * scale, B, eid, h, H, me, HAS_B)
    return me, eid, kk, vv, s


@triton.jit
def fwd(Q, K, V, B, EK, EV, EID, ROWPTR, COL, OUT, OUT32, LSE, scale, H, C, CV,
        HAS_B: tl.constexpr, HAS_EK: tl.constexpr, HAS_EV: tl.constexpr, SAVE32: tl.constexpr,
        BLOCK_E: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_CV: tl.constexpr):
    """Per (target, head): online-softmax attention over the incoming edges; output and log-sum-exp
    (with SAVE32 the output also in float32 into OUT32, for the backward's ``dout · out``)."""
    i, h, start, end, oc, mc, ov, mv = _program(ROWPTR, H, C, CV, BLOCK_C, BLOCK_CV)
    q = tl.load(Q + (i * H + h) * C + oc, mask=mc, other=0.0).to(tl.float32)
    m = tl.full([1], float("-inf"), tl.float32)
    l = tl.zeros([1], tl.float32)
    acc = tl.zeros([BLOCK_CV], tl.float32)
    for e0 in range(start, end, BLOCK_E):
        me, eid, kk, vv, s = _target_block(q, K, V, B, EK, EV, EID, COL, e0, end, h, H, C, CV, oc, mc,
                                           ov, mv, scale, HAS_B, HAS_EK, HAS_EV, BLOCK_E)
        s = tl.where(me, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # all hidden so far: no shift
        p = tl.exp(s - m_ref)
        corr = tl.exp(m - m_ref)
        acc = acc * corr + tl.sum(p[:, None] * vv, axis=0)
        l = l * corr + tl.sum(p, axis=0)
        m = m_new
    m_ref = tl.where(m == float("-inf"), 0.0, m)
    has = l > 0
    o = acc / tl.where(has, l, 1.0)
    _store(OUT, (i * H + h) * CV + ov, o, mv)
    if SAVE32:
        tl.store(OUT32 + (i * H + h) * CV + ov, o, mask=mv)
    # +inf for a node without (visible) edges: exp(s - lse) = 0 for every edge in backward
    lse = tl.where(has, m_ref + tl.log(tl.where(has, l, 1.0)), float("inf"))
    tl.store(LSE + i * H + h + tl.arange(0, 1), lse)


@triton.jit
def bwd_target(Q, K, V, B, EK, EV, EID, ROWPTR, COL, LSE, DELTA, DOUT,
               DQ, DB, DEK, DEV, scale, H, C, CV,
               HAS_B: tl.constexpr, HAS_EK: tl.constexpr, HAS_EV: tl.constexpr,
               NEED_Q: tl.constexpr, NEED_B: tl.constexpr, NEED_EK: tl.constexpr,
               NEED_EV: tl.constexpr, SHARED: tl.constexpr,
               BLOCK_E: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_CV: tl.constexpr):
    """Per (target, head): grad q and the per-edge gradients. With SHARED (edge key and edge
    value one tensor, C == CV) DEK receives the sum of both roles."""
    i, h, start, end, oc, mc, ov, mv = _program(ROWPTR, H, C, CV, BLOCK_C, BLOCK_CV)
    q = tl.load(Q + (i * H + h) * C + oc, mask=mc, other=0.0).to(tl.float32)
    do = tl.load(DOUT + (i * H + h) * CV + ov, mask=mv, other=0.0).to(tl.float32)
    lse = tl.load(LSE + i * H + h)
    delta = tl.load(DELTA + i * H + h)
    dq = tl.zeros([BLOCK_C], tl.float32)
    for e0 in range(start, end, BLOCK_E):
        me, eid, kk, vv, s = _target_block(q, K, V, B, EK, EV, EID, COL, e0, end, h, H, C, CV, oc, mc,
                                           ov, mv, scale, HAS_B, HAS_EK, HAS_EV, BLOCK_E)
        p = tl.where(me, tl.exp(s - lse), 0.0)
        ds = p * (tl.sum(vv * do[None, :], axis=1) - delta)
        if NEED_Q:
            dq += tl.sum(ds[:, None] * kk, axis=0)
        if NEED_B:
            _store(DB, eid * H + h, ds, me)
        if NEED_EK:
            g = (ds * scale)[:, None] * q[None, :]
            if SHARED:
                g += p[:, None] * do[None, :]
            _store(DEK, (eid[:, None] * H + h) * C + oc[None, :], g, me[:, None] & mc[None, :])
        if NEED_EV:
            _store(DEV, (eid[:, None] * H + h) * CV + ov[None, :], p[:, None] * do[None, :],
                   me[:, None] & mv[None, :])
    if NEED_Q:
        _store(DQ, (i * H + h) * C + oc, dq * scale, mc)


@triton.jit
def bwd_source(Q, K, V, B, EK, EV, EID, CPTR, CPOS, CTGT, LSE, DELTA, DOUT, DK, DV,
               scale, H, C, CV,
               HAS_B: tl.constexpr, HAS_EK: tl.constexpr, HAS_EV: tl.constexpr,
               BLOCK_E: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_CV: tl.constexpr):
    """Per (source, head): grad k and grad v over the source's outgoing edges (CSC order)."""
    j, h, start, end, oc, mc, ov, mv = _program(CPTR, H, C, CV, BLOCK_C, BLOCK_CV)
    k = tl.load(K + (j * H + h) * C + oc, mask=mc, other=0.0).to(tl.float32)
    v = tl.load(V + (j * H + h) * CV + ov, mask=mv, other=0.0).to(tl.float32)
    dk = tl.zeros([BLOCK_C], tl.float32)
    dv = tl.zeros([BLOCK_CV], tl.float32)
    for e0 in range(start, end, BLOCK_E):
        oe = e0 + tl.arange(0, BLOCK_E)
        me = oe < end
        i = tl.load(CTGT + oe, mask=me, other=0)
        qq = _rows(Q, i, h, H, C, oc, me, mc)
        do = _rows(DOUT, i, h, H, CV, ov, me, mv)
        lse = tl.load(LSE + i * H + h, mask=me, other=float("inf"))
        delta = tl.load(DELTA + i * H + h, mask=me, other=0.0)
        eid = oe
        if (HAS_B or HAS_EK) or HAS_EV:
            eid = tl.load(EID + tl.load(CPOS + oe, mask=me, other=0), mask=me, other=0)
        kk, vv = _edge_extras(k[None, :], v[None, :], EK, EV, eid, h, H, C, CV, oc, mc, ov, mv, me,
                              HAS_EK, HAS_EV)
        s = _add_bias(tl.sum(qq * kk, axis=1) * scale, B, eid, h, H, me, HAS_B)
        p = tl.where(me, tl.exp(s - lse), 0.0)
        ds = p * (tl.sum(do * vv, axis=1) - delta)
        dv += tl.sum(p[:, None] * do, axis=0)
        dk += tl.sum(ds[:, None] * qq, axis=0)
    _store(DK, (j * H + h) * C + oc, dk * scale, mc)
    _store(DV, (j * H + h) * CV + ov, dv, mv)
