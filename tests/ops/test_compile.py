"""``torch.compile(model, fullgraph=True)`` through the fused C++ kernel: its forward, backward and
CSC build are custom ops (``graphattn::fused_attention_fwd`` / ``_bwd``, ``graphattn::build_csc``)
that pass ``torch.library.opcheck``, and the layer and both models trace into one graph whose
outputs and gradients equal eager mode's.

The model tests compile with the ``aot_eager`` backend: it runs everything a compile needs of
these ops (Dynamo's trace with the fake implementations, AOTAutograd's joint graph with the
registered backward) in seconds; the same models through inductor (the default backend, which
adds C++ code generation) are marked slow.
"""
from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from graphattn import GraphSelfAttention, to_csr
from graphattn.nn.models import GraphClassifier, NodeClassifier
from graphattn.ops import extension, fused_cpp

pytestmark = pytest.mark.skipif(not extension.fused_available(),
                                reason=f"fused C++ kernel unavailable: {extension.build_error()}")

N, E, F, D = 12, 40, 8, 3
#: two graphs of 5 and 7 nodes (GraphClassifier's batch)
BATCH = torch.tensor([0] * 5 + [1] * 7)


def _graph(seed: int = 0):
    """``(x (N, F), edge_index (2, E), edge_attr (E, D))``: random edges, so some nodes have no
    incoming edge and some pairs repeat."""
    gen = torch.Generator().manual_seed(seed)
    x, ei = torch.randn(N, F, generator=gen), torch.randint(0, N, (2, E), generator=gen)
    return x, ei, torch.randn(E, D, generator=gen)


def _case(name: str):
    """``(model, args(x, edge_index, edge_attr), kwargs)`` of a small float32 model."""
    torch.manual_seed(0)
    if name == "layer":
        return GraphSelfAttention(F, 4, heads=2), lambda x, ei, ea: (x, ei), {}
    if name == "layer_edge_attr":
        return GraphSelfAttention(F, 4, heads=2, edge_dim=D), lambda x, ei, ea: (x, ei, ea), {}
    if name == "layer_self_loops":  # loops replaced inside the graph (a data-dependent edge count), GATConv's way
        model = GraphSelfAttention(F, 4, heads=2, edge_dim=D, add_self_loops=True)
        return model, lambda x, ei, ea: (x, ei, ea), {}
    if name == "graph_tokens":  # global tokens (their edges are built inside the graph) and edge features
        model = GraphClassifier(F, 16, 3, num_layers=2, heads=2, num_global_tokens=2, edge_dim=D)
        return model, lambda x, ei, ea: (x, ei, BATCH, ea), {"num_graphs": 2}
    if name == "node":  # self-loops replaced (a data-dependent edge count) and APPNP propagation
        model = NodeClassifier(F, 16, 3, num_layers=2, heads=2, self_loops=True, propagation=2)
        return model, lambda x, ei, ea: (x, ei), {}
    if name == "node_edge_attr":
        return NodeClassifier(F, 16, 3, num_layers=2, heads=2, edge_dim=D), lambda x, ei, ea: (x, ei, ea), {}
    raise ValueError(name)


CASES = ("layer", "layer_edge_attr", "layer_self_loops", "graph_tokens", "node", "node_edge_attr")


def _run(model, args, kwargs):
    """Output and the gradients of the parameters and of ``x``."""
    x = args[0].detach().requires_grad_()
    model.zero_grad()
    out = model(x, *args[1:], **kwargs)
    out.square().sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None] + [x.grad]


@pytest.fixture(scope="module")
def compiled():
    """``name -> (model, compiled model, compile counter)``, compiled on first use and shared."""
    torch._dynamo.reset()
    made = {}

    def get(name):
        if name not in made:
            model, args, kwargs = _case(name)
            counter = CompileCounterWithBackend("aot_eager")
            made[name] = (model, torch.compile(model, backend=counter, fullgraph=True), counter, args, kwargs)
        return made[name]

    yield get
    torch._dynamo.reset()


def _assert_matches_eager(model, fast, args, kwargs):
    want, want_grads = _run(model, args, kwargs)
    got, got_grads = _run(fast, args, kwargs)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert len(got_grads) == len(want_grads)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", CASES)
def test_fullgraph_compile_matches_eager(compiled, name):
    """One graph (fullgraph: no break), the fused kernel inside it, outputs and gradients as eager."""
    model, fast, counter, make_args, kwargs = compiled(name)
    x, ei, ea = _graph(0)
    _assert_matches_eager(model, fast, make_args(x, ei, ea), kwargs)
    assert counter.frame_count == 1
    targets = {n.target for g in counter.graphs for n in g.graph.nodes if n.op == "call_function"}
    assert torch.ops.graphattn.fused_attention_fwd.default in targets or \
        torch.ops.graphattn.fused_attention_fwd in targets, sorted(map(str, targets))


@pytest.mark.parametrize("name", ["layer_edge_attr", "graph_tokens"])
def test_another_graph_of_the_same_size_reuses_the_compiled_code(compiled, name):
    """The CSR view is built inside the graph (no guard on the edge_index tensor): a new graph of the
    same sizes runs the same compiled code, with its own result."""
    model, fast, counter, make_args, kwargs = compiled(name)
    x, ei, ea = _graph(0)
    _assert_matches_eager(model, fast, make_args(x, ei, ea), kwargs)
    frames = counter.frame_count
    x, ei, ea = _graph(1)
    _assert_matches_eager(model, fast, make_args(x, ei, ea), kwargs)
    assert counter.frame_count == frames


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_fullgraph_compile_with_inductor_matches_eager(name):
    model, make_args, kwargs = _case(name)
    torch._dynamo.reset()
    x, ei, ea = _graph(0)
    _assert_matches_eager(model, torch.compile(model, fullgraph=True), make_args(x, ei, ea), kwargs)
    torch._dynamo.reset()


# ------------------------------------------------------------------ the custom ops themselves
def _op_args(kind: str, grad: bool = True):
    """Arguments of ``graphattn::fused_attention_fwd`` on a 5-node graph (node 4 has no incoming
    edge): ``plain``; ``edge`` (bias, edge key and value in input order, cached CSC arrays);
    ``shared`` (one tensor as edge key and value, weights returned)."""
    gen = torch.Generator().manual_seed(3)
    ei = torch.tensor([[0, 1, 2, 3, 3, 0, 2], [1, 0, 1, 2, 0, 3, 2]])
    csr = to_csr(ei, 5, cache=False)
    Nn, H, C = 5, 2, 3

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_(grad)

    q, k, v = rand(Nn, H, C), rand(Nn, H, C), rand(Nn, H, C)
    bias = ek = ev = eid = None
    csc = (None, None, None)
    shared, weights = False, False
    if kind == "edge":
        bias, ek, ev, eid, csc = rand(7, H), rand(7, H, C), rand(7, H, C), csr.perm, fused_cpp.csc_arrays(csr)
    elif kind == "shared":
        ek, eid, shared, weights = rand(7, H, C), csr.perm, True, True
    return (q, k, v, bias, ek, ev, eid, csr.rowptr, csr.col, *csc, 0.5, shared, weights)


@pytest.mark.parametrize("kind", ["plain", "edge", "shared"])
def test_forward_op_passes_opcheck(kind):
    """Schema, fake implementation and autograd registration; AOT dispatch (static and dynamic
    shapes) runs the registered backward, which builds the CSC arrays in the graph when none
    were given (``plain``, ``shared``)."""
    torch.library.opcheck(fused_cpp.fused_attention_fwd, _op_args(kind))


def test_backward_and_csc_ops_pass_opcheck():
    q, k, v, bias, ek, ev, eid, rowptr, col, cptr, cperm, ctgt, scale, shared, _ = _op_args("edge", grad=False)
    _, lse, _ = fused_cpp.fused_attention_fwd(q, k, v, bias, ek, ev, eid, rowptr, col, cptr, cperm, ctgt, scale,
                                              shared, False)
    dout = torch.randn_like(q)
    for needs in ((True, True, True, True, True), (False, False, True, False, True)):
        torch.library.opcheck(fused_cpp.fused_attention_bwd, (q, k, v, bias, ek, ev, eid, rowptr, col, cptr, cperm,
                                                              ctgt, lse, dout, scale, shared, *needs))
    for small in (True, False):
        torch.library.opcheck(fused_cpp.build_csc, (rowptr, col, small))
    cptr64, cperm64, ctgt64 = fused_cpp.build_csc(rowptr, col, False)
    assert cperm64.dtype == torch.int64 and torch.equal(cperm64, cperm.long()) and torch.equal(ctgt64, ctgt.long())
    assert torch.equal(cptr64, cptr)


def test_second_derivative_in_eager_mode_through_the_custom_op():
    """create_graph=True takes the differentiable backward: exact second derivatives, as gradgradcheck sees."""
    q, k, v, bias, ek, ev, eid, rowptr, col, cptr, cperm, ctgt, scale, shared, w = _op_args("edge")

    def fn(q, k, v, bias, ek, ev):
        return fused_cpp.fused_attention_fwd(q, k, v, bias, ek, ev, eid, rowptr, col, cptr, cperm, ctgt, scale,
                                             shared, w)[0]

    assert torch.autograd.gradgradcheck(fn, (q, k, v, bias, ek, ev))
