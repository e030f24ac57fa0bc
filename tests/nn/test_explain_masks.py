"""PyG's Explainer on models built from GraphSelfAttention: edge masks scale every message as
in PyG's convs, computed by a differentiable per-edge path (graphattn.nn.attention.explain)."""
import pytest
import torch
from torch_geometric.explain import AttentionExplainer, Explainer, GNNExplainer
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
from torch_geometric.utils import add_self_loops, coalesce

from graphattn import GraphClassifier, GraphSelfAttention, NodeClassifier
from graphattn.nn.features import gcn_normalized_graph


def _graph(n=9, e=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g), torch.randint(0, n, (2, e), generator=g)


@pytest.mark.parametrize("score", ["dot", "additive"])
@pytest.mark.parametrize("concat", [True, False])
def test_mask_of_ones_changes_nothing(score, concat):
    x, ei = _graph()
    ea, bias = torch.randn(ei.size(1), 2), torch.randn(ei.size(1), 2)
    bias[3] = float("-inf")  # a hidden edge stays hidden
    layer = GraphSelfAttention(4, 3, heads=2, edge_dim=2, score=score, concat=concat).eval()
    want, (_, alpha) = layer(x, ei, ea, True, attn_bias=bias)
    set_masks(layer, torch.ones(ei.size(1)), ei, apply_sigmoid=False)
    got, (ei_back, alpha_m) = layer(x, ei, ea, True, attn_bias=bias)
    clear_masks(layer)
    assert ei_back is ei
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(alpha_m, alpha, rtol=1e-5, atol=1e-6)


def test_mask_scales_each_message_after_the_softmax():
    xs, xd = torch.randn(6, 5), torch.randn(4, 3)
    ei = torch.tensor([[0, 1, 2, 3, 4, 5, 5], [0, 0, 1, 1, 2, 2, 0]])
    layer = GraphSelfAttention((5, 3), 2, heads=2, root_weight=False).eval()
    _, (_, alpha) = layer((xs, xd), ei, return_attention_weights=True)
    mask = torch.tensor([0.0, 0.5, 1.0, 0.2, 0.0, 0.9, 1.0])
    set_masks(layer, mask, ei, apply_sigmoid=False)
    out = layer((xs, xd), ei)
    clear_masks(layer)
    v = layer.lin_value(xs).view(6, 2, 2)  # (N_src, H, C)
    want = torch.zeros(4, 2, 2).index_add(0, ei[1], (alpha * mask[:, None])[..., None] * v[ei[0]])
    torch.testing.assert_close(out, want.reshape(4, 4), rtol=1e-5, atol=1e-6)


def _path(n=10):
    s = torch.arange(n - 1)
    return torch.cat([torch.stack([s, s + 1]), torch.stack([s + 1, s])], 1)  # both directions


def _node_explainer(model, epochs=30):
    return Explainer(model, algorithm=GNNExplainer(epochs=epochs), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object",
                     model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))


@pytest.mark.parametrize("self_loops", [False, True])
@pytest.mark.parametrize("input_loops", [False, True])
def test_gnnexplainer_masks_exactly_the_receptive_field(self_loops, input_loops):
    torch.manual_seed(0)
    ei = _path()
    if input_loops:  # loops interleaved with the other edges (sorted): the layer re-orders them
        ei = coalesce(add_self_loops(ei)[0])
    x = torch.randn(10, 4)
    model = NodeClassifier(4, 16, 3, num_layers=2, heads=2, self_loops=self_loops).eval()
    explanation = _node_explainer(model)(x, ei, index=0)
    # 2 attention layers: node 0 hears 1 -> 0, and node 1 hears 0 -> 1 and 2 -> 1 (and, when the
    # model attends over the input's own loops, 0 -> 0 and 1 -> 1; self_loops=True replaces them)
    used = {tuple(e) for e in ei[:, explanation.edge_mask > 0].t().tolist()}
    loops = {(0, 0), (1, 1)} if input_loops and not self_loops else set()
    assert used == {(1, 0), (0, 1), (2, 1)} | loops
    assert torch.isfinite(explanation.edge_mask).all()


@pytest.mark.parametrize("tokens", [1, 2])
@pytest.mark.parametrize("loop_at", [0, 3, 5])
def test_replaced_input_loops_are_unmasked_with_global_tokens(tokens, loop_at):
    """self_loops=True replaces the input's loops; with global tokens (which get no loop) their mask
    entries must still change nothing, wherever the loop sits in the input."""
    torch.manual_seed(0)
    x = torch.randn(6, 4)
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    edges.insert(loop_at, (2, 2))
    ei = torch.tensor(edges).t()
    model = NodeClassifier(4, 16, 3, num_layers=2, heads=2, self_loops=True, num_global_tokens=tokens).eval()
    ref = model(x, ei)
    try:
        set_masks(model, (ei[0] != ei[1]).float(), ei, apply_sigmoid=False)  # 0 on the loop only
        assert torch.allclose(model(x, ei), ref, atol=1e-5)
        set_masks(model, torch.zeros(ei.size(1)), ei, apply_sigmoid=False)  # every input edge hidden
        assert not torch.allclose(model(x, ei), ref, atol=1e-3)
    finally:
        clear_masks(model)


def test_gnnexplainer_on_a_graph_classifier_with_global_tokens():
    torch.manual_seed(0)
    ei = _path(8)
    x = torch.randn(8, 4)
    model = GraphClassifier(4, 16, 2, num_layers=2, heads=2, num_global_tokens=1).eval()
    explainer = Explainer(model, algorithm=GNNExplainer(epochs=20), explanation_type="model",
                          node_mask_type=None, edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="graph",
                                            return_type="raw"))
    explanation = explainer(x, ei, batch=torch.zeros(8, dtype=torch.long))
    # token edges were appended after the graph's edges; every graph edge got a trained mask
    assert explanation.edge_mask.shape == (ei.size(1),) and (explanation.edge_mask > 0).all()


def test_a_mask_for_other_edges_is_a_clear_error():
    x, ei = _graph()
    layer = GraphSelfAttention(4, 3)
    other = torch.stack([torch.arange(40) % 9, (torch.arange(40) + 1) % 9])  # 40 edges, no loops
    set_masks(layer, torch.ones(40), other, apply_sigmoid=True)
    with pytest.raises(ValueError, match="edge mask has 40 entries but this GraphSelfAttention layer sees 30"):
        layer(x, ei)
    clear_masks(layer)
    relu = GraphSelfAttention(4, 3, normalization="relu")
    set_masks(relu, torch.ones(30), ei)
    with pytest.raises(NotImplementedError, match="normalization='softmax'"):
        relu(x, ei)


def test_attention_explainer_reads_the_layers_weights():
    torch.manual_seed(0)
    ei, x = _path(), torch.randn(10, 4)
    model = NodeClassifier(4, 16, 3, num_layers=2, heads=2, num_global_tokens=1).eval()
    seen = []
    handle = model.backbone.blocks[0].attn.register_message_forward_hook(
        lambda module, inputs, out: seen.append(inputs[0]["alpha"]))
    model(x, ei)
    handle.remove()
    (alpha,) = seen  # (E + token edges, H): token edges are appended after the graph's
    assert alpha.size(1) == 2 and alpha.size(0) > ei.size(1) + 2 * 9 and not alpha.requires_grad
    explainer = Explainer(model, algorithm=AttentionExplainer(), explanation_type="model",
                          edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node",
                                            return_type="raw"))
    mask = explainer(x, ei, index=0).edge_mask
    near = (ei[0] <= 2) & (ei[1] <= 2)  # the 2-hop subgraph of node 0: nodes 0, 1, 2
    assert (mask[near] > 0).all() and (mask[~near] == 0).all() and (mask <= 1).all()


@pytest.mark.parametrize("branch", [dict(propagation=2), dict(gcn_weight=0.5, propagation=2)])
def test_explainer_masks_reach_the_propagation_and_gcn_branch(branch):
    torch.manual_seed(0)
    ei, x = _path(), torch.randn(10, 4)
    model = NodeClassifier(4, 16, 3, num_layers=1, heads=2, **branch).eval()
    want = model(x, ei)
    set_masks(model, torch.ones(ei.size(1)), ei, apply_sigmoid=False)
    torch.testing.assert_close(model(x, ei), want)  # a mask of ones changes nothing
    # mask out the only edge into node 0 (1 -> 0): no path reaches node 0 any more, through the
    # attention, the GCN branch or the propagation, so its output ignores every other node
    mask = torch.ones(ei.size(1))
    mask[(ei[0] == 1) & (ei[1] == 0)] = 0.0
    set_masks(model, mask, ei, apply_sigmoid=False)
    x2 = x.clone()
    x2[1:] += 1.0
    torch.testing.assert_close(model(x2, ei)[0], model(x, ei)[0])
    clear_masks(model)
    assert not torch.allclose(model(x2, ei)[0], model(x, ei)[0])  # unmasked, it hears them


def test_given_loops_keep_their_mask_entries_outside_node_classifier():
    """Loops the input brings (add_self_loops) are attended over unless a model replaced them: hiding
    them must change the output (bipartite pairs i -> i are no loops at all)."""
    torch.manual_seed(0)
    xs, xd = torch.randn(4, 5), torch.randn(3, 3)
    ei = torch.tensor([[1, 0, 0, 1], [0, 1, 0, 1]])
    layer = GraphSelfAttention((5, 3), 2, heads=1, root_weight=False).eval()
    x = torch.randn(5, 4)
    e = add_self_loops(torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]))[0]
    model = GraphClassifier(4, 16, 2, num_global_tokens=1).eval()
    for net, args, mask in ((layer, ((xs, xd), ei), torch.tensor([1.0, 1.0, 0.0, 0.0])),
                            (model, (x, e), (e[0] != e[1]).float())):
        ref = net(*args)
        try:
            set_masks(net, mask, args[1], apply_sigmoid=False)
            assert not torch.allclose(net(*args), ref, atol=1e-4)
        finally:
            clear_masks(net)


@pytest.mark.parametrize("kw", [dict(self_loops=True, num_global_tokens=1, local_mpnn="gin"),
                                dict(self_loops=True, local_mpnn="gin"), dict(num_global_tokens=2, local_mpnn="gin")])
def test_explainer_with_a_gin_branch_next_to_replaced_loops_and_tokens(kw):
    """PyG's loop rule in the GIN branch expected one loop per target, global tokens included
    (AssertionError); the branch now gets the mask mapped as the attention layers do."""
    torch.manual_seed(0)
    n = 20
    ei = torch.randint(0, n, (2, 60))
    ei = torch.cat([ei, torch.arange(3).repeat(2, 1)], 1)  # with a few input self-loops
    x = torch.randn(n, 6)
    m = NodeClassifier(6, 16, 3, num_layers=2, heads=2, **kw).eval()
    ref = m(x, ei)
    set_masks(m, torch.ones(ei.size(1)), ei, apply_sigmoid=False)
    try:
        torch.testing.assert_close(m(x, ei), ref)
        cut = torch.ones(ei.size(1))
        cut[0] = 0.0  # hiding one edge reaches the GIN branch too
        set_masks(m, cut, ei, apply_sigmoid=False)
        assert not torch.allclose(m(x, ei), ref)
    finally:
        clear_masks(m)
    exp = Explainer(m, GNNExplainer(epochs=3), explanation_type="model", edge_mask_type="object",
                    model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    assert exp(x, ei, index=0).edge_mask.shape == (ei.size(1),)


def test_gin_branch_mask_follows_the_edges_when_loops_are_replaced_in_place():
    """One loop per node given, replaced by NodeClassifier's own (same count, other order): the
    GIN branch's mask must follow the edges, not their positions — the order of the input's
    edges does not change what hiding one edge does."""
    torch.manual_seed(0)
    n = 8
    ei = torch.randint(0, n, (2, 20))
    ei = ei[:, ei[0] != ei[1]]
    loops = torch.arange(n).repeat(2, 1)
    x = torch.randn(n, 6)
    m = NodeClassifier(6, 16, 3, num_layers=1, heads=2, self_loops=True, local_mpnn="gin").eval()
    outs = []
    for graph, hidden in ((torch.cat([loops, ei], 1), n), (torch.cat([ei, loops], 1), 0)):  # edge ei[:, 0] hidden
        mask = torch.ones(graph.size(1))
        mask[hidden] = 0.0
        set_masks(m, mask, graph, apply_sigmoid=False)
        try:
            outs.append(m(x, graph))
        finally:
            clear_masks(m)
    torch.testing.assert_close(outs[0], outs[1])


@pytest.mark.parametrize("tokens", [0, 2])
def test_attention_explainer_scores_input_edges_when_loops_are_replaced(tokens):
    # the layers attend over the input's non-loop edges then one loop per node: PyG's
    # AttentionExplainer keeps alpha[:E] of the hooks, so they get alpha per input edge

    torch.manual_seed(0)
    x = torch.randn(5, 4)
    ei = torch.tensor([[2, 0, 1, 4, 3, 1], [2, 1, 2, 4, 2, 0]])  # loops 2->2 and 4->4 given
    model = NodeClassifier(4, 8, 3, heads=2, num_layers=1, self_loops=True, num_global_tokens=tokens).eval()
    explainer = Explainer(model, AttentionExplainer(reduce="max"), explanation_type="model", node_mask_type=None,
                          edge_mask_type="object", model_config=dict(mode="multiclass_classification",
                                                                     task_level="node", return_type="raw"))
    mask = explainer(x, ei, index=2).edge_mask
    layer = next(m for m in model.modules() if isinstance(m, GraphSelfAttention))
    seen = []
    handle = layer.register_message_forward_hook(lambda mod, kw, out: seen.append(kw[0]["alpha"]))
    looped, _ = gcn_normalized_graph(ei, 5)
    model.backbone(x, looped)  # the layer's own edge order
    handle.remove()
    alpha = seen[0].max(-1).values
    where = {(s, d): k for k, (s, d) in enumerate(looped.t().tolist())}
    expected = torch.stack([alpha[where[(s, d)]] for s, d in ei.t().tolist()])
    reached = mask > 0  # edges into node 2's one-hop receptive field
    assert reached.tolist() == [True, False, True, False, True, False]
    torch.testing.assert_close(mask[reached], expected[reached])
    assert all(m.hook_input_edges is None for m in model.modules() if isinstance(m, GraphSelfAttention))


def test_users_own_message_hooks_keep_the_layers_edge_order():
    torch.manual_seed(0)
    x = torch.randn(6, 4)
    ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    model = NodeClassifier(4, 8, 3, heads=4, num_layers=1, self_loops=True, num_global_tokens=1).eval()
    layer = next(m for m in model.modules() if isinstance(m, GraphSelfAttention))
    seen = []
    layer.register_message_forward_hook(lambda mod, kw, out: seen.append(kw[0]["alpha"].shape))
    model(x, ei)
    assert seen == [(4 + 6 + 2 * 6 + 1, 4)]  # edges, one loop per node, token edges both ways, token loop
