"""Input checks stay user-facing but cheap: one sync per call, none on derived tensors,
none repeated per batch, none under torch.compile; integer arguments of any integer type."""
from unittest import mock

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import graphattn.functional as functional
from graphattn import AddLaplacianPE, GlobalTokens, GraphClassifier, GraphSelfAttention, edge_attention
from graphattn.functional import check_all_finite, edge_attention_prechecked
from graphattn.loader.partition import partition_nodes
from graphattn.ops.padding import GraphLayout
from graphattn.utils.validation import check_edge_index, check_int, check_row_index, mark_index_checked

EI = torch.tensor([[0, 1, 2, 3, 4, 0, 2], [1, 2, 3, 4, 0, 0, 4]])


def _aminmax_spy():
    calls = []
    real = torch.aminmax

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)
    return calls, mock.patch("torch.aminmax", spy)


def _count_bool_syncs(fn):
    """Number of ``Tensor.__bool__`` calls (blocking reads of a device value) during ``fn()``."""
    n = [0]
    real = torch.Tensor.__bool__

    def spy(self):
        n[0] += 1
        return real(self)
    with mock.patch.object(torch.Tensor, "__bool__", spy):
        fn()
    return n[0]


# ------------------------------------------------------------------ finite checks
def test_check_all_finite_one_sync_and_names_the_culprit():
    good = [("a", torch.randn(4, 3), False), ("b", torch.randn(5), False), ("c", None, False),
            ("bias", torch.tensor([0.0, -float("inf")]), True)]
    assert _count_bool_syncs(lambda: check_all_finite(good)) == 1
    for i, name in ((0, "a"), (1, "b")):
        bad = [(n, None if t is None else t.clone(), neg) for n, t, neg in good]
        bad[i][1].view(-1)[2] = float("nan")
        with pytest.raises(ValueError, match=rf"^{name} contains NaN or inf values \(1 of"):
            check_all_finite(bad)
    with pytest.raises(ValueError, match=r"^bias contains NaN or \+inf"):
        check_all_finite([("bias", torch.tensor([0.0, float("inf")]), True)])


def test_edge_attention_checks_user_tensors_with_one_sync():
    E = EI.size(1)
    q, bias, ek = torch.randn(5, 2, 3), torch.randn(E, 2), torch.randn(E, 2, 3)
    names = []
    real = functional.check_all_finite
    with mock.patch.object(functional, "check_all_finite",
                           lambda items: (names.append([n for n, t, _ in items if t is not None]), real(items))):
        edge_attention(q, q, q, EI, bias=bias, edge_key=ek, edge_value=ek, impl="chunked")
    assert names == [["q", "k", "v", "edge_key", "bias"]]  # shared edge_key/edge_value once
    ek[3, 1, 2] = float("inf")
    with pytest.raises(ValueError, match="^edge_key contains NaN or inf"):
        edge_attention(q, q, q, EI, edge_key=ek, impl="chunked")
    edge_attention_prechecked(q, q, q, EI, edge_key=ek, impl="chunked")  # internal callers opt out


@pytest.mark.parametrize("score", ["dot", "additive"])
def test_layer_checks_only_its_inputs_once(score):
    layer = GraphSelfAttention(4, 3, heads=2, edge_dim=2, score=score)
    x, ea, b = torch.randn(5, 4), torch.randn(EI.size(1), 2), torch.zeros(EI.size(1), 2)
    seen = []
    real = functional.check_all_finite
    with mock.patch("graphattn.nn.attention.inputs.check_all_finite",
                    lambda items: (seen.append([n for n, _, _ in items]), real(items))), \
            mock.patch.object(functional, "check_all_finite", lambda items: seen.append("inner")):
        layer(x, EI, ea, attn_bias=b)
    assert seen == [["x", "edge_attr", "attn_bias"]]  # no second pass over q, k, v, (E, H, C) edge_key
    for name, t in (("x", x), ("edge_attr", ea)):
        t[1, 1] = float("nan")
        with pytest.raises(ValueError, match=f"^{name} contains NaN"):
            layer(x, EI, ea, attn_bias=b)
        t[1, 1] = 0.0
    b[0, 0] = float("inf")
    with pytest.raises(ValueError, match="^attn_bias contains NaN or \\+inf"):
        layer(x, EI, ea, attn_bias=b)


def test_finite_checks_are_skipped_while_compiling():
    bad = torch.tensor([float("nan")])
    with mock.patch("torch.compiler.is_compiling", return_value=True):
        check_all_finite([("x", bad, False)])  # no data-dependent branch inside a traced graph
    with pytest.raises(ValueError):
        check_all_finite([("x", bad, False)])


def test_compiled_layer_breaks_only_outside_the_checks():
    torch._dynamo.reset()
    layer = GraphSelfAttention(8, 4, heads=2, edge_dim=3)
    x, ea, b = torch.randn(12, 8), torch.randn(40, 3), torch.randn(40, 2)
    ei = torch.randint(0, 12, (2, 40))
    layer(x, ei, ea, attn_bias=b)  # CSR of this graph built (and range-checked) eagerly, cached
    ex = torch._dynamo.explain(layer)(x, ei, ea, attn_bias=b)
    where = {s.filename.rsplit("/", 1)[-1] for r in ex.break_reasons for s in r.user_stack[-1:]}
    assert not where & {"functional.py", "validation.py", "layer.py", "inputs.py", "score.py", "dispatch.py"}, where
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(layer)(x, ei, ea, attn_bias=b), layer(x, ei, ea, attn_bias=b))


# ------------------------------------------------------------------ range checks
def test_index_range_check_is_remembered_until_the_tensor_changes():
    ei = torch.tensor([[0, 1], [1, 2]])
    calls, patch = _aminmax_spy()
    with patch:
        check_edge_index(ei, 3)
        check_edge_index(ei, 3)
    assert len(calls) == 1
    ei[0, 0] = 7  # in-place edit bumps the version counter: scanned again
    with pytest.raises(ValueError, match="refers to node 7 but num_nodes=3"):
        check_edge_index(ei, 3)
    with pytest.raises(ValueError, match="refers to node 2"):
        check_edge_index(torch.tensor([[0, 1], [1, 2]]), 2)  # a smaller num_nodes is a new check
    idx = torch.tensor([0, 2, 1])
    mark_index_checked(idx, 3)
    with _aminmax_spy()[1]:
        check_row_index(idx, 3, 3, "i")
    with pytest.raises(ValueError, match="i has row ids in"):
        check_row_index(idx, 3, 2, "i")


def test_global_tokens_standalone_validates_and_can_skip():
    tok = GlobalTokens(4, 2)
    x, b = torch.randn(5, 4), torch.tensor([0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match="edge_index refers to node 5"):
        tok(x, torch.tensor([[0, 5], [1, 0]]), b, num_graphs=2)
    with pytest.raises(ValueError, match="num_graphs=2 but batch holds graph id 2"):
        tok(x, EI, torch.tensor([0, 0, 1, 1, 2]), num_graphs=2)
    calls, patch = _aminmax_spy()
    ei = EI.clone()
    with patch:
        tg = tok(x, ei, b, num_graphs=2, check_range=False)
    assert calls == []  # caller vouches: no scan, no sync
    with patch:  # the token graph is valid by construction: the layer's CSR build skips its scan
        GraphSelfAttention(4, 2)(tg.x, tg.edge_index)
    assert all(s != tg.edge_index.shape for s in calls)
    ref = tok(x, ei, b, num_graphs=2)
    assert torch.equal(ref.edge_index, tg.edge_index) and torch.equal(ref.x, tg.x)


def test_graph_layout_check_range():
    b = torch.tensor([0, 0, 1])
    with pytest.raises(ValueError, match="num_graphs=1"):
        GraphLayout(b, 3, 1)
    calls, patch = _aminmax_spy()
    with patch:
        lay = GraphLayout(b, 3, 3, check_range=False)
    assert calls == [] and lay.B == 3 and lay.L == 2


def test_graph_classifier_checks_each_batch_once():
    torch.manual_seed(0)
    m = GraphClassifier(4, 8, 2, num_layers=2, heads=2, num_global_tokens=1, edge_dim=3,
                        edge_vocab_sizes=[3, 2, 2]).eval()
    x, b = torch.randn(10, 4), torch.tensor([0] * 5 + [1] * 5)
    ei, ea = torch.randint(0, 10, (2, 30)), torch.randint(0, 2, (30, 3))
    calls, patch = _aminmax_spy()
    with patch:
        m(x, ei, b, edge_attr=ea, num_graphs=2)
    int_scans = [s for s in calls if s in (b.shape, ei.shape)]
    assert int_scans == [b.shape, ei.shape]  # batch once, edge_index once; tokens / layers / CSR: none
    assert not any(len(s) == 1 and s[0] >= 30 for s in calls if s != b.shape)  # no per-layer row-id scan
    calls.clear()
    with patch:
        m(x, ei, b, edge_attr=ea, num_graphs=2)
    assert [s for s in calls if s == ei.shape] == []  # same graph tensor: not scanned again
    with pytest.raises(ValueError, match="num_graphs=1 but batch holds graph id 1"):
        m(x, ei, b, edge_attr=ea, num_graphs=1)
    with pytest.raises(ValueError, match="edge_index refers to node 10"):
        m(x, torch.tensor([[0, 10], [1, 0]]), b, edge_attr=ea[:2], num_graphs=2)


def test_laplacian_pe_uses_shared_edge_index_check():
    with pytest.raises(ValueError, match="^data.edge_index refers to node 5 but num_nodes=3"):
        AddLaplacianPE(2)(Data(edge_index=torch.tensor([[0, 5], [5, 0]]), num_nodes=3))
    with pytest.raises(TypeError, match="^data.edge_index must have an integer dtype"):
        AddLaplacianPE(2)(Data(edge_index=torch.tensor([[0.0, 1.0], [1.0, 0.0]]), num_nodes=3))


def test_float_edge_index_and_other_int_types():
    with pytest.raises(TypeError, match="integer dtype"):
        partition_nodes(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), 2, 2)


    assert check_int("k", np.int64(3), 1) == 3 and check_int("k", torch.tensor(2), 0) == 2
    for bad in (True, 2.5, torch.tensor(2.0), "3", 0):
        with pytest.raises(ValueError, match="k must be an int >= 1"):
            check_int("k", bad, 1)
