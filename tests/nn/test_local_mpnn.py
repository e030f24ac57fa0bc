"""GraphGPS-style local message-passing branch next to the attention (local_mpnn)."""
import pytest
import torch
from tiny_inputs import write_tu_text
from torch_geometric.nn import GINEConv

from graphattn import GraphClassifier, GraphTransformerBlock
from graphattn.cli import main as cli
from graphattn.nn.models.registry import build_model
from graphattn.tasks.molecules.pipeline import model_spec
from graphattn.train import load_checkpoint
from graphattn.tasks.molecules.recipe import MoleculeRecipe


def test_block_adds_exactly_the_gine_branch():
    torch.manual_seed(0)
    x, ei, ea = torch.randn(12, 16), torch.randint(0, 12, (2, 40)), torch.randn(40, 16)
    blk = GraphTransformerBlock(16, heads=2, edge_dim=16, local_mpnn="gine").eval()
    ref = GraphTransformerBlock(16, heads=2, edge_dim=16).eval()
    ref.load_state_dict({k: v for k, v in blk.state_dict().items() if not k.startswith("local.")})
    assert isinstance(blk.local, GINEConv)
    xn = blk.norm1(x)
    h = x + blk.attn(xn, ei, ea) + blk.local(xn, ei, ea)
    want = h + blk.ffn(blk.norm2(h))
    assert torch.allclose(blk(x, ei, ea), want, atol=1e-6)
    assert not torch.allclose(ref(x, ei, ea), want, atol=1e-3)  # the branch matters
    # table form and local_edges: same as per-edge rows restricted to the first edges
    table, idx = torch.randn(3, 16), torch.randint(0, 3, (40,))
    a = blk(x, ei, table, edge_attr_index=idx, local_edges=25)
    h = x + blk.attn(xn, ei, table[idx]) + blk.local(xn, ei[:, :25], table[idx[:25]])
    assert torch.allclose(a, h + blk.ffn(blk.norm2(h)), atol=1e-6)


def test_gin_branch_counts_neighbours_and_errors():
    """Softmax attention averages: a star's centre cannot tell 3 leaves from 6 with equal
    features. The sum-aggregating GIN branch can."""
    torch.manual_seed(1)
    blk = GraphTransformerBlock(8, heads=2, local_mpnn="gin").eval()
    plain = GraphTransformerBlock(8, heads=2).eval()

    v = torch.randn(8)

    def centre(b, leaves):  # every node has the same (non-constant) feature vector
        x = v.repeat(leaves + 1, 1)
        ei = torch.stack([torch.arange(1, leaves + 1), torch.zeros(leaves, dtype=torch.long)])
        return b(x, ei)[0]

    assert torch.allclose(centre(plain, 3), centre(plain, 6), atol=1e-6)
    assert not torch.allclose(centre(blk, 3), centre(blk, 6), atol=1e-3)
    with pytest.raises(ValueError, match="local_mpnn must be None or one of"):
        GraphTransformerBlock(8, heads=2, local_mpnn="gcn")
    with pytest.raises(ValueError, match="needs edge features"):
        GraphTransformerBlock(8, heads=2, local_mpnn="gine")


def test_classifier_with_tokens_uses_only_bond_edges_and_round_trips():
    torch.manual_seed(2)
    hp = MoleculeRecipe(hidden=16, layers=2, pe_dim=0, local_mpnn="gine")
    spec = model_spec("none", 3, hp)
    assert spec.kwargs["local_mpnn"] == "gine"
    model = build_model(spec).eval()
    assert model.backbone.blocks[0].local is not None
    x = torch.stack([torch.randint(0, 5, (20,))] + [torch.zeros(20, dtype=torch.long)] * 8, 1)
    ei = torch.randint(0, 20, (2, 30))
    ei = ei[:, (ei[0] // 10) == (ei[1] // 10)]  # two graphs of 10 nodes
    ea = torch.zeros(ei.size(1), 4, dtype=torch.long)
    batch = torch.arange(20) // 10
    seen = []
    hook = model.backbone.blocks[0].local.register_forward_pre_hook(lambda m, a: seen.append(a[1].size(1)))
    out = model(x, ei, batch, ea, num_graphs=2)
    hook.remove()
    assert out.shape == (2, 3) and torch.isfinite(out).all() and seen == [ei.size(1)]
    again = build_model(spec)
    again.load_state_dict(model.state_dict())
    assert torch.allclose(again.eval()(x, ei, batch, ea, num_graphs=2), out)
    assert "local_mpnn" not in model_spec("none", 3, hp.replace(local_mpnn=None)).kwargs  # old specs unchanged
    assert isinstance(GraphClassifier(9, 16, 2, local_mpnn="gin").backbone.blocks[1].local, torch.nn.Module)


def test_cli_trains_predicts_and_explains_with_a_local_branch(tmp_path, molecule_csv):
    fixture = molecule_csv
    assert cli.main(["train", "--csv", str(fixture), "--split", "random", "--epochs", "1", "--local-mpnn",
                     "gine", "--no-descriptors", "--hidden", "16", "--layers", "1", "--heads", "2", "--pe-dim", "4",
                     "--batch-size", "16", "--no-progress", "--out", str(tmp_path / "run")]) == 0
    ck = tmp_path / "run" / "best.pt"
    meta = load_checkpoint(ck)["meta"]
    assert meta["model"]["kwargs"]["local_mpnn"] == "gine"
    assert meta["descriptors"] is None and "graph_feature_dim" not in meta["model"]["kwargs"]
    assert cli.main(["predict", "--checkpoint", str(ck), "--smiles", "CCO", "c1ccccc1O"]) == 0
    assert cli.main(["explain", "--checkpoint", str(ck), "--smiles", "c1ccccc1O",
                     "--out", str(tmp_path / "m.png")]) == 0


def test_social_tasks_refuse_the_molecule_only_flag(capsys):
    assert cli.main(["train", "karate", "--local-mpnn", "gin", "--epochs", "1"]) == 2
    assert "--local-mpnn is a molecule / graph-set option" in capsys.readouterr().err


def test_graph_sets_take_a_gin_branch(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    txt = write_tu_text(tmp_path / "TOY.txt")
    assert cli.main(["train", "--tu-text", str(txt), "--local-mpnn", "gin", "--epochs", "2", "--batch-size", "8",
                     "--no-progress", "--out", str(tmp_path / "g")]) == 0
    meta = load_checkpoint(tmp_path / "g" / "best.pt")["meta"]
    assert meta["model"]["kwargs"]["local_mpnn"] == "gin" and meta["hparams"]["local_mpnn"] == "gin"
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "g" / "best.pt")]) == 0


def test_molecule_task_refuses_social_only_flags(capsys):
    assert cli.main(["train", "tox21", "--gcn-weight", "0.5", "--label-input", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "--gcn-weight, --label-input are social-network option(s)" in err


@pytest.mark.parametrize("n", [0, 1])
def test_degenerate_graphs_with_branch_and_bond_table_are_finite(n):
    """No bonds (a one-atom or empty graph): empty bond table, token edges only."""
    model = GraphClassifier(2, 16, 3, num_layers=2, heads=2, num_global_tokens=1, edge_dim=3,
                            node_vocab_sizes=[4, 4], edge_vocab_sizes=[5, 3, 2], local_mpnn="gine").eval()
    out = model(torch.zeros(n, 2, dtype=torch.long), torch.zeros(2, 0, dtype=torch.long),
                torch.zeros(n, dtype=torch.long), torch.zeros(0, 3, dtype=torch.long), num_graphs=1)
    assert out.shape == (1, 3) and torch.isfinite(out).all()


@pytest.mark.parametrize("local", ["gin", "gine"])
def test_int32_edge_index_with_a_local_mpnn(local):
    torch.manual_seed(0)
    x, ei = torch.randn(5, 8), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    kw = dict(edge_dim=3) if local == "gine" else {}
    model = GraphClassifier(8, 16, 2, num_layers=1, local_mpnn=local, **kw).eval()
    ea = {"edge_attr": torch.randn(4, 3)} if local == "gine" else {}
    assert torch.allclose(model(x, ei.int(), **ea), model(x, ei, **ea), atol=1e-6)
