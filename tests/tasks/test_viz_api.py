"""The explain helpers called from user code: molecule_attention and the
node ego-graph functions on models and inputs the CLI never builds."""
import pytest
import torch
from torch_geometric.data import Batch, Data

from graphattn import AddLaplacianPE, GraphClassifier, NodeClassifier
from graphattn.data import ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS, smiles_to_data
from graphattn.tasks.molecules.viz import colour_levels, draw_molecule_attention, molecule_attention
from graphattn.tasks.social.viz import draw_ego_attention, last_layer_attention

pytest.importorskip("rdkit")
pytest.importorskip("matplotlib")


def _mol_model(**kw):
    torch.manual_seed(0)
    return GraphClassifier(9, 16, 3, num_layers=2, heads=2, node_vocab_sizes=ATOM_FEATURE_DIMS, **kw)


def test_molecule_attention_one_molecule_any_model_mode_kept():
    d = smiles_to_data("CCO")
    model = _mol_model()  # no edge encoder: bond features are not read (not passed, so not refused)
    model.train()
    prob, scores = molecule_attention(model, d)
    assert model.training  # the caller's mode is kept, as PyG's Explainer does
    model.eval()
    want = torch.sigmoid(model(d.x, d.edge_index)[0])
    torch.testing.assert_close(prob, want)
    assert scores.shape == (3,) and float(scores.max()) == pytest.approx(1.0)
    with_bonds = _mol_model(edge_dim=4, edge_vocab_sizes=BOND_FEATURE_DIMS)
    assert molecule_attention(with_bonds, d)[0].shape == (3,)
    batch = Batch.from_data_list([d, smiles_to_data("c1ccccc1")])
    with pytest.raises(ValueError, match="one molecule; got a batch of 2"):
        molecule_attention(model, batch)
    prob1, _ = molecule_attention(model, batch.get_example(1))  # per graph works
    assert prob1.shape == (3,)


def test_last_layer_attention_reads_every_input_and_the_drawing_checks_its_arguments(tmp_path):
    torch.manual_seed(0)
    n = 30
    ei = torch.randint(0, n, (2, 120))
    ei = torch.cat([ei, ei.flip(0)], 1)
    data = AddLaplacianPE(4)(Data(x=torch.randn(n, 5), edge_index=ei, y=torch.randint(0, 2, (n,)), num_nodes=n))
    model = NodeClassifier(5, 16, 2, num_layers=2, heads=2, pe_dim=4, edge_dim=3, num_global_tokens=1)
    ea = torch.randn(ei.size(1), 3)
    inputs = {"x": data.x, "edge_index": ei, "edge_attr": ea, "pe": data.lap_pe,
              "pe_eigvals": data.lap_eigval, "pe_mask": getattr(data, "lap_pe_mask", None)}
    logits, e, alpha = last_layer_attention(model, data, inputs)
    model.eval()
    want = model(data.x, ei, ea, pe=data.lap_pe, pe_eigvals=data.lap_eigval)
    torch.testing.assert_close(logits, want)  # the picture explains the model's real forward
    assert alpha.shape == (ei.size(1),)
    names = ["a", "b"]
    heads = alpha[:, None].repeat(1, 2)  # the layer's own (E, H) weights are accepted too
    draw_ego_attention(data, 3, e, heads, logits, names, tmp_path / "x.png")
    assert (tmp_path / "x.png").is_file()
    # a 4-node path 0-1-2-3 (both directions) around node 1: arrows 0->1, 2->1 and the pair 2-3 once
    path = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    small = Data(x=torch.randn(4, 5), edge_index=path, y=torch.zeros(4, dtype=torch.long), num_nodes=4)
    info = draw_ego_attention(small, 1, path, torch.full((6,), 0.5), torch.zeros(4, 2), names, tmp_path / "p.png",
                              hops=2)
    assert info["nodes"] == 4 and info["edges"] == 3
    for bad in (-1, n, 2.5):
        with pytest.raises(ValueError, match="node must be a row"):
            draw_ego_attention(data, bad, e, alpha, logits, names, tmp_path / "y.png")
    with pytest.raises(ValueError, match="alpha must have shape"):
        draw_ego_attention(data, 3, e, alpha[:-1], logits, names, tmp_path / "y.png")
    with pytest.raises(ValueError, match="0 transformer layers"):
        last_layer_attention(NodeClassifier(5, 16, 2, num_layers=0), data, {"x": data.x, "edge_index": ei})


def test_molecule_colours_stretch_real_differences_not_near_equal_scores(tmp_path):
    benzene = [1.0, 0.9990, 0.9985, 0.9981, 0.9990, 1.0]  # rollout of six equivalent atoms
    assert min(colour_levels(benzene)) > 0.99  # all red: was drawn white .. red like a strong pattern
    assert colour_levels([1.0, 0.4, 0.7]) == pytest.approx([1.0, 0.0, 0.5])  # a real spread: full range
    assert colour_levels([1.0, 0.9]) == pytest.approx([1.0, 0.6])  # 10 % apart: 40 % of the scale
    assert colour_levels([0.0, 0.0]) == [1.0, 1.0]
    assert draw_molecule_attention("c1ccccc1", benzene, tmp_path / "b.svg").is_file()


def test_molecule_figure_names_the_molecule_and_is_cropped_to_it():
    pytest.importorskip("rdkit")
    pytest.importorskip("matplotlib")
    from graphattn.tasks.molecules.viz import molecule_figure
    fig = molecule_figure("CCO", [("rollout", [1.0, 0.6, 0.2])])
    assert fig.get_suptitle() == "CCO"
    named = molecule_figure("CCO", [("rollout", [1.0, 0.6, 0.2])], title="ethanol: CCO")
    assert named.get_suptitle() == "ethanol: CCO"
    image = fig.axes[0].get_images()[0].get_array()
    assert image.shape[0] < 520 and image.shape[1] < 600  # RDKit's white margins cropped
    bar = [ax for ax in fig.axes if ax.get_label() == "colour bar"][0]
    assert "relative to this molecule" in bar.get_xlabel()


def test_the_ego_graph_accounts_for_the_centres_own_attention():
    pytest.importorskip("matplotlib")
    import torch
    from torch_geometric.data import Data
    from graphattn.tasks.social.viz import ego_attention_figure
    ei = torch.tensor([[1, 2, 3, 0, 0, 0, 1, 2], [0, 0, 0, 0, 1, 2, 1, 2]])  # into 0 from 1, 2, 3 and itself
    alpha = torch.tensor([0.3, 0.2, 0.1, 0.4, 1.0, 1.0, 0.0, 0.0])
    data = Data(num_nodes=4, y=torch.tensor([0, 1, 0, 1]))
    fig, info = ego_attention_figure(data, 0, ei, alpha, torch.zeros(4, 2), ["a", "b"], 1, 60, 3)
    assert info["self_alpha"] == pytest.approx(0.4) and info["drawn_alpha"] == pytest.approx(0.6)
    assert info["self_alpha"] + info["drawn_alpha"] == pytest.approx(1.0)
    assert "0 to itself: α = 0.40" in fig.axes[0].get_title()
