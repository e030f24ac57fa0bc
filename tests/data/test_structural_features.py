"""Structural node features of graph sets: the local degree profile (LDP) option."""
import torch
from torch_geometric.data import Data
from torch_geometric.utils import erdos_renyi_graph, to_undirected

from graphattn.cli import main as cli
from graphattn.data import add_structural_features
from graphattn.data.structural import local_degree_profile
from graphattn.tasks.social.graph_data import load_graphs
from graphattn.tasks.social.specs import GraphDataSpec
from graphattn.train import load_checkpoint

from tiny_inputs import write_tu_text


def _star_plus_edge():
    # 0 is a hub of 1, 2, 3; 3-4 hangs off the star; 5 is isolated
    return to_undirected(torch.tensor([[0, 0, 0, 3], [1, 2, 3, 4]])), 6


def test_local_degree_profile_by_hand():
    ei, n = _star_plus_edge()
    got = local_degree_profile(ei, n)
    # degrees: 0:3, 1:1, 2:1, 3:2, 4:1, 5:0; node 0's neighbours have degrees 1, 1, 2
    mean0 = 4 / 3
    std0 = ((2 * (1 - mean0) ** 2 + (2 - mean0) ** 2) / 3) ** 0.5
    want = torch.tensor([[1, 2, mean0, std0],      # node 0
                         [3, 3, 3, 0], [3, 3, 3, 0],  # leaves see the hub
                         [1, 3, 2, 1],             # node 3: neighbours 0 (deg 3) and 4 (deg 1)
                         [2, 2, 2, 0],             # node 4 sees node 3
                         [0, 0, 0, 0]], dtype=torch.float)  # isolated: zeros, not NaN/inf
    torch.testing.assert_close(got, torch.log1p(want))


def test_ldp_columns_are_appended_and_finite_on_degenerate_graphs():
    ei, n = _star_plus_edge()
    graphs = [Data(edge_index=ei, num_nodes=n), Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=1),
              Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=0)]
    plain = add_structural_features([g.clone() for g in graphs], max_degree=4, rw_steps=2)
    ldp = add_structural_features([g.clone() for g in graphs], max_degree=4, rw_steps=2, ldp=True)
    for p, q in zip(plain, ldp):
        assert q.x.shape == (p.num_nodes, p.x.size(1) + 4) and torch.isfinite(q.x).all()
        torch.testing.assert_close(q.x[:, :-4], p.x)
    torch.testing.assert_close(ldp[0].x[:, -4:], local_degree_profile(ei, n))


def test_graph_sets_use_ldp_and_old_specs_still_load(tmp_path, monkeypatch):
    """``graphattn train`` specs carry ``ldp``; a checkpoint's spec without it rebuilds the old features."""
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    txt = write_tu_text(tmp_path / "TOY.txt")
    assert cli.main(["train", "--tu-text", str(txt), "--epochs", "1", "--batch-size", "8", "--no-progress",
                     "--out", str(tmp_path / "g")]) == 0
    spec = load_checkpoint(tmp_path / "g" / "best.pt")["meta"]["data"]
    assert spec["ldp"] is True and GraphDataSpec().ldp is True
    new = load_graphs(GraphDataSpec.from_dict(spec))
    old = load_graphs(GraphDataSpec.from_dict({k: v for k, v in spec.items() if k != "ldp"}))
    assert new[0].num_features == old[0].num_features + 4
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "g" / "best.pt")]) == 0


def test_features_computed_over_all_graphs_equal_per_graph_ones():
    # degree and LDP columns are computed once over the graphs' union and split back: bit for bit the
    # per-graph values, whatever the mix of sizes (empty, one-node, edgeless, dense)
    torch.manual_seed(0)
    graphs = [Data(edge_index=erdos_renyi_graph(n, 0.3) if n > 1 else torch.empty(2, 0, dtype=torch.long),
                   num_nodes=n) for n in (0, 1, 5, 12, 2, 0, 30, 7)]
    for kw in (dict(ldp=True), dict(ldp=True, rw_steps=0), dict(degree="log", ldp=True), dict(max_degree=None)):
        together = add_structural_features([g.clone() for g in graphs], **kw)
        for g, t in zip(graphs, together):
            alone = add_structural_features([g.clone()], **{**kw, "max_degree": kw.get("max_degree", 64)
                                                            if kw.get("max_degree", 64) is not None else
                                                            max(int(torch.bincount(h.edge_index[0], minlength=h.num_nodes)
                                                                    .max()) if h.num_nodes and h.edge_index.numel()
                                                                else 0 for h in graphs)})[0]
            assert torch.equal(t.x, alone.x)
