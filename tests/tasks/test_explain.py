"""Explanations: the per-task attention × gradient attribution of molecules (exact gradients,
different atoms for different tasks), the pictures' colour bars, atom names and legends, and
`graphattn explain --task / --top-k`."""
import re

import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

from graphattn import GraphClassifier, ProbabilityEnsemble
from graphattn.cli.main import main
from graphattn.data.featurize import ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS, smiles_to_data
from graphattn.tasks.molecules.attribution import (attention_gradients, collect_attention_gradients,
                                                   molecule_attribution)
from graphattn.tasks.molecules.viz import atom_labels, molecule_figure, molecule_logits
from graphattn.tasks.social.viz import ARROW_ZORDER, ego_attention_figure

from tiny_inputs import TINY, write_csv

Chem = pytest.importorskip("rdkit.Chem")
pytest.importorskip("matplotlib")

#: two tasks that read different atoms: has a nitrogen, has an oxygen
CHAINS = ["CCCC", "CCCCC", "CCCCCC", "CC(C)CC", "CCC(C)CC", "C1CCCCC1", "CC1CCCC1", "CCC1CCCC1"]
SMILES = list({Chem.CanonSmiles(s): s for c in CHAINS
               for s in (c, "N" + c, c + "O", "N" + c + "O", "O" + c + "N")}.values())  # no duplicates
#: molecules with one N and one O far apart: (SMILES, index of N, index of O)
PROBES = [("NCCCCCCO", 0, 7), ("OCCC(N)CC", 4, 0), ("NCC1CCC(O)CC1", 0, 6), ("OC1CCC(N)CC1", 5, 0)]


def _labels(s):
    return [float("N" in s), float("O" in s)]


def _trained(seed=0, layers=1, steps=60):
    """``(model, final loss)``: a model whose prediction passes through attention only (readout
    from one global token), trained on the two tasks."""
    torch.manual_seed(seed)
    graphs = [smiles_to_data(s) for s in SMILES]
    for g, s in zip(graphs, SMILES):
        g.y = torch.tensor([_labels(s)])
    b = Batch.from_data_list(graphs)
    model = GraphClassifier(9, 16, 2, num_layers=layers, heads=2, node_vocab_sizes=ATOM_FEATURE_DIMS,
                            num_global_tokens=1, readout="token")
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(b.x, b.edge_index, b.batch), b.y)
        loss.backward()
        opt.step()
    return model.eval(), float(loss.detach())


def _mask_gradient(model, d, task):
    """∂logit/∂m on the input edges, m a PyG Explainer edge mask at 1 (each message α·v scaled by
    it, on every layer): the head and layer sum of α ⊙ ∂logit/∂α, by the layer's own per-edge path."""
    mask = torch.nn.Parameter(torch.ones(d.edge_index.size(1), dtype=torch.float64))
    set_masks(model, mask, d.edge_index, apply_sigmoid=False)
    try:
        edge_attr = d.edge_attr if model.backbone.edge_encoder is not None else None
        model(d.x, d.edge_index, edge_attr=edge_attr)[0, task].backward()
    finally:
        clear_masks(model)
    return mask.grad


@pytest.mark.parametrize("kw", [dict(num_layers=1, heads=1),
                                dict(num_layers=3, heads=2, num_global_tokens=1, edge_dim=4,
                                     edge_vocab_sizes=BOND_FEATURE_DIMS),
                                dict(num_layers=2, heads=2, score="additive")])
def test_attention_gradient_is_exact(kw):
    torch.manual_seed(0)
    d = smiles_to_data("CC(=O)Nc1ccc(O)cc1")
    model = GraphClassifier(9, 16, 3, node_vocab_sizes=ATOM_FEATURE_DIMS, **kw).double().eval()
    with torch.no_grad():  # the caller's no_grad does not stop it
        with collect_attention_gradients(model) as probes:
            logits, _ = molecule_logits(model, d)
    rel = attention_gradients(probes, logits[0, 2])
    assert len(rel) == kw["num_layers"] and all(r.shape == (e.size(1), kw["heads"]) for e, r in rel)
    assert all(r.abs().sum() > 0 for _, r in rel)  # the gradient reaches every layer
    torch.testing.assert_close(logits, model(d.x, d.edge_index, edge_attr=d.edge_attr if "edge_dim" in kw else None))
    E = d.edge_index.size(1)  # the molecule's edges come first, global-token edges after
    summed = sum(r[:E].sum(-1) for _, r in rel)
    torch.testing.assert_close(summed, _mask_gradient(model, d, 2), rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="scalar output"):
        attention_gradients(probes, logits)


@pytest.mark.parametrize("seed,layers", [(0, 1), (1, 2)])
def test_each_task_points_at_the_atom_it_reads(seed, layers):
    model, loss = _trained(seed, layers)
    assert loss < 0.2
    for smiles, n_atom, o_atom in PROBES:
        d = smiles_to_data(smiles)
        prob, has_n = molecule_attribution(model, d, 0)
        _, has_o = molecule_attribution(model, d, 1)
        assert prob.tolist() == pytest.approx([1.0, 1.0], abs=0.3)
        assert int(has_n.argmax()) == n_atom and int(has_o.argmax()) == o_atom, smiles
        assert float((has_n - has_o).abs().max()) > 0.5
        assert has_n.max() == pytest.approx(1.0) and float(has_n.min()) >= 0.0


def test_ensemble_attribution_is_the_mean_of_its_members():
    members = [_trained(0, steps=20)[0].requires_grad_(False), _trained(1, steps=20)[0]]
    ens = ProbabilityEnsemble(members).eval()
    d = smiles_to_data(PROBES[1][0])
    prob, scores = molecule_attribution(ens, d, 1)
    parts = [molecule_attribution(m, d, 1) for m in members]
    mean = torch.stack([p[1] for p in parts]).mean(0)
    torch.testing.assert_close(scores, mean / mean.max())
    torch.testing.assert_close(prob, torch.stack([p[0] for p in parts]).mean(0))


def test_attribution_refuses_what_it_cannot_explain():
    model = GraphClassifier(9, 8, 2, num_layers=1, heads=2, node_vocab_sizes=ATOM_FEATURE_DIMS)
    d = smiles_to_data("CCO")
    for bad in (2, -1, "has_n", True):
        with pytest.raises(ValueError, match=r"task must be a task number in \[0, 2\)"):
            molecule_attribution(model, d, bad)
    with pytest.raises(ValueError, match="one molecule; got a batch of 2"):
        molecule_attribution(model, Batch.from_data_list([d, d]), 0)
    model.backbone.blocks[0].attn.normalization = "relu"
    with pytest.raises(ValueError, match="normalization='relu'"):
        molecule_attribution(model, d, 0)


def test_molecule_figure_has_a_colour_bar_per_panel_and_names_atoms(tmp_path):
    assert atom_labels("CC(=O)Nc1ccc(O)cc1") == ["C0", "C1", "O2", "N3", "C4", "C5", "C6", "C7", "O8", "C9", "C10"]
    fig = molecule_figure("CCO", [("rollout", [1.0, 0.5, 0.2]), ("task", [0.1, 0.3, 1.0])], caption="a 0.5\nb 0.1")
    bars = [ax for ax in fig.axes if ax.get_label() == "colour bar"]
    assert len(bars) == 2 and all(getattr(ax, "_colorbar", None) is not None for ax in bars)
    assert [ax.get_title() for ax in fig.axes if ax not in bars] == ["rollout", "task"]
    lo, hi = bars[0]._colorbar.norm.vmin, bars[0]._colorbar.norm.vmax
    assert (lo, hi) == pytest.approx((0.2, 1.0))  # the panel's own scores, highest red
    with pytest.raises(ValueError, match="3 atom scores but 'CCCO' has 4 atoms"):
        molecule_figure("CCCO", [("x", [1.0, 0.5, 0.2])])


def test_ego_graph_labels_the_top_k_with_legend_colour_bar_and_arrows_above_nodes():
    # a centre (0) listening to 15 neighbours (1..15), each with two further neighbours
    src = list(range(1, 16)) + [j for i in range(1, 16) for j in (15 + 2 * i - 1, 15 + 2 * i)]
    dst = [0] * 15 + [i for i in range(1, 16) for _ in range(2)]
    ei = torch.tensor([src + dst, dst + src])
    n = 46
    alpha = torch.rand(ei.size(1), generator=torch.Generator().manual_seed(0))
    data = Data(x=torch.zeros(n, 1), edge_index=ei, y=torch.randint(0, 3, (n,)), num_nodes=n)
    logits = torch.randn(n, 3, generator=torch.Generator().manual_seed(1))
    names = ["cat", "dog", "eel"]
    fig, info = ego_attention_figure(data, 0, ei, alpha, logits, names, hops=2, top_k=4)
    into = ei[1] == 0
    want = ei[0, into][alpha[into].argsort(descending=True)[:4]].tolist()
    assert info["labelled"] == [0] + want
    ax = next(a for a in fig.axes if a.get_label() != "<colorbar>")
    labels = [t.get_text() for t in ax.texts]
    assert sorted(labels) == sorted(str(v) for v in [0] + want)  # the centre and the top 4, no other node
    assert any(getattr(a, "_colorbar", None) is not None for a in fig.axes)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert set(legend[:-1]) == {names[int(c)] for c in logits.argmax(-1)[:n]} and legend[-1] == "node 0 (centre)"
    nodes = [c for c in ax.collections if c.get_zorder() == 2]
    arrows = [p for p in ax.patches if p.get_zorder() == ARROW_ZORDER]
    assert nodes and len(arrows) == 15 and all(a.get_zorder() > nodes[0].get_zorder() for a in arrows)
    assert min(t.get_zorder() for t in ax.texts) > ARROW_ZORDER
    _, none = ego_attention_figure(data, 0, ei, alpha, logits, names, hops=2, top_k=0)
    assert none["labelled"] == [0]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("explain")
    src = write_csv(root / "mols.csv", ["smiles", "has_n", "has_o"], [(s, *map(int, _labels(s))) for s in SMILES])
    assert main(["train", "--csv", str(src), "--split", "random", "--out", str(root / "run"), *TINY]) == 0
    return str(root / "run" / "best.pt")


ATOM = r"[A-Z][a-z]?\d+ \d\.\d\d"


def test_explain_task_draws_its_attribution_and_names_atoms(checkpoint, tmp_path, capsys):
    capsys.readouterr()
    out = tmp_path / "m.png"
    assert main(["explain", "--checkpoint", checkpoint, "--smiles", "NCCCCCCO", "--task", "has_o",
                 "--top-k", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    rollout = re.search(rf"most attended atoms ((?:{ATOM}(?:, )?)+);", text)
    task = re.search(rf"has_o attribution \(attention × gradient\) ((?:{ATOM}(?:, )?)+)\.", text)
    assert rollout and task, text
    for found in (rollout, task):
        atoms = [a.split()[0] for a in found.group(1).split(", ")]
        assert len(atoms) == 2 and set(atoms) <= set(atom_labels("NCCCCCCO"))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["explain", "--checkpoint", checkpoint, "--smiles", "CCO", "--out", str(tmp_path / "r.png")]) == 0
    text = capsys.readouterr().out
    assert "attribution" not in text and len(re.findall(ATOM, text)) == 3  # default --top-k 3


def test_explain_refuses_unknown_tasks_and_bad_top_k(checkpoint, tmp_path, capsys):
    capsys.readouterr()
    assert main(["explain", "--checkpoint", checkpoint, "--smiles", "CCO", "--task", "toxic",
                 "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "--task 'toxic' is not a task of this model; its tasks are: has_n, has_o" in err
    assert main(["explain", "--checkpoint", checkpoint, "--smiles", "CCO", "--top-k", "-1"]) == 2
    assert "--top-k must be >= 0" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_social_explain_top_k_and_task(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    assert main(["train", "karate", "--epochs", "1", "--out", str(tmp_path / "k"), "--no-progress"]) == 0
    ck = str(tmp_path / "k" / "best.pt")
    capsys.readouterr()
    assert main(["explain", "--checkpoint", ck, "--node", "0", "--hops", "2", "--top-k", "3",
                 "--out", str(tmp_path / "e.png")]) == 0
    assert ", 4 labelled;" in capsys.readouterr().out and (tmp_path / "e.png").is_file()
    assert main(["explain", "--checkpoint", ck, "--node", "0", "--task", "x"]) == 2
    assert "--task is for molecule checkpoints" in capsys.readouterr().err
    assert main(["explain", "--checkpoint", ck, "--node", "0", "--top-k", "-2"]) == 2
    assert "--top-k must be >= 0" in capsys.readouterr().err
