"""SMILES -> PyG graphs (graphattn.data.featurize): the atom and bond feature tables, CIP
stereo labels whatever the spelling or RDKit's mode, and the SMILES that are refused."""
import math

import pytest
import torch

pytest.importorskip("rdkit")

from rdkit import Chem  # noqa: E402
from rdkit.Chem import rdCIPLabeler  # noqa: E402
from torch_geometric.utils import from_smiles  # noqa: E402

from graphattn.data import (ATOM_FEATURE_DIMS, ATOM_FEATURE_NAMES, BOND_FEATURE_DIMS, BOND_FEATURE_NAMES,  # noqa: E402
                            FEATURIZER_VERSION, InvalidSmilesError, molecules, smiles_to_data)
from graphattn.data.featurize import CANONICAL_MAX_ATOMS  # noqa: E402

ATOM = {n: i for i, n in enumerate(ATOM_FEATURE_NAMES)}
BOND = {n: i for i, n in enumerate(BOND_FEATURE_NAMES)}


def assert_in_range(x, dims):
    assert x.dtype == torch.long and x.size(1) == len(dims)
    assert (x >= 0).all()
    assert (x < torch.tensor(dims)).all()


def test_feature_tables():
    assert isinstance(FEATURIZER_VERSION, str)
    assert len(ATOM_FEATURE_DIMS) == len(ATOM_FEATURE_NAMES) == 9
    assert len(BOND_FEATURE_DIMS) == len(BOND_FEATURE_NAMES) == 4
    assert all(isinstance(d, int) and d >= 2 for d in ATOM_FEATURE_DIMS + BOND_FEATURE_DIMS)


def test_benzene_is_aromatic_ring():
    d = smiles_to_data("c1ccccc1")
    assert d.x.shape == (6, 9) and d.edge_index.shape == (2, 12) and d.edge_attr.shape == (12, 4)
    assert (d.x[:, ATOM["atomic_num"]] == 6).all()
    assert (d.x[:, ATOM["is_aromatic"]] == 1).all()
    assert (d.x[:, ATOM["is_in_ring"]] == 1).all()
    assert (d.x[:, ATOM["num_hs"]] == 1).all()
    assert (d.x[:, ATOM["degree"]] == 3).all()  # total degree counts the H
    assert (d.x[:, ATOM["hybridization"]] == 2).all()  # SP2
    assert (d.edge_attr[:, BOND["bond_type"]] == 3).all()  # AROMATIC
    assert (d.edge_attr[:, BOND["is_conjugated"]] == 1).all()
    assert (d.edge_attr[:, BOND["is_in_ring"]] == 1).all()
    assert d.smiles == "c1ccccc1"


def test_ethanol_degrees_hydrogens_and_edges():
    d = smiles_to_data("CCO", y=[1.0, float("nan")])
    assert d.x[:, ATOM["atomic_num"]].tolist() == [6, 6, 8]
    assert d.x[:, ATOM["degree"]].tolist() == [4, 4, 2]
    assert d.x[:, ATOM["num_hs"]].tolist() == [3, 2, 1]
    assert d.x[:, ATOM["is_in_ring"]].tolist() == [0, 0, 0]
    assert d.x[:, ATOM["hybridization"]].tolist() == [3, 3, 3]  # SP3
    assert d.x[:, ATOM["formal_charge"]].tolist() == [5, 5, 5]  # charge 0
    # two bonds, both directions, sorted by (source, target)
    assert d.edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]
    assert (d.edge_attr[:, BOND["bond_type"]] == 0).all()  # SINGLE
    assert d.y.shape == (1, 2) and d.y.dtype == torch.float32
    assert d.y[0, 0] == 1 and math.isnan(d.y[0, 1])


def test_charges_ions_and_salts():
    nh4 = smiles_to_data("[NH4+]")
    assert nh4.x.shape == (1, 9)
    assert nh4.x[0, ATOM["formal_charge"]] == 5 + 1
    assert nh4.x[0, ATOM["num_hs"]] == 4
    assert nh4.x[0, ATOM["degree"]] == 4
    assert nh4.edge_index.shape == (2, 0) and nh4.edge_index.dtype == torch.long
    assert nh4.edge_attr.shape == (0, 4)

    na = smiles_to_data("[Na+]")
    assert na.num_nodes == 1 and na.edge_index.shape == (2, 0)
    salt = smiles_to_data("CC.[Cl-]")
    assert salt.num_nodes == 3 and salt.edge_index.shape == (2, 2)
    assert salt.x[2, ATOM["atomic_num"]] == 17 and salt.x[2, ATOM["formal_charge"]] == 5 - 1


def test_stereo_and_chirality():
    # the chirality column is the CIP label (featurizer version 4): 0 none, 1 R, 2 S, 3 r, 4 s, 5 other
    assert smiles_to_data("C[C@H](N)O").x[1, ATOM["chirality"]] == 1  # (R)-1-aminoethanol
    assert smiles_to_data("C[C@@H](N)O").x[1, ATOM["chirality"]] == 2  # (S)
    assert smiles_to_data("N[C@@H](C)O").x[1, ATOM["chirality"]] == 1  # (R) spelled another way
    assert smiles_to_data("CC(N)O").x[1, ATOM["chirality"]] == 0  # unspecified
    e = smiles_to_data("C/C=C/C")
    double = e.edge_attr[:, BOND["bond_type"]] == 1
    assert (e.edge_attr[double, BOND["stereo"]] == 2).all()  # STEREOE
    z = smiles_to_data("C/C=C\\C")
    assert (z.edge_attr[z.edge_attr[:, BOND["bond_type"]] == 1, BOND["stereo"]] == 1).all()
    assert (smiles_to_data("C#N").edge_attr[:, BOND["bond_type"]] == 2).all()


def test_unusual_values_fall_in_other_bucket():
    d = smiles_to_data("[Fe+6]")  # charge beyond +5
    assert d.x[0, ATOM["formal_charge"]] == ATOM_FEATURE_DIMS[ATOM["formal_charge"]] - 1
    dummy = smiles_to_data("*C")
    assert dummy.x[0, ATOM["atomic_num"]] == 0
    for s in ["[Fe+6]", "*C", "[U]", "[CH2]C", "F[S](F)(F)(F)(F)F", "[2H]C"]:
        d = smiles_to_data(s)
        assert_in_range(d.x, ATOM_FEATURE_DIMS)
        assert_in_range(d.edge_attr, BOND_FEATURE_DIMS)


@pytest.mark.parametrize("smiles", ["CCO", "c1ccccc1O", "C[C@H](N)C(=O)[O-]", "CC.[Cl-]",
                                    "C/C=C/c1ccncc1", "[NH4+]", "O=S(=O)(O)c1ccc2ccccc2c1"])
def test_matches_pyg_from_smiles_on_shared_columns(smiles):
    """Cross-check with PyG's from_smiles on the columns both featurizers have."""
    ours, pyg = smiles_to_data(smiles), from_smiles(smiles)
    # PyG columns: atomic_num, chirality, degree, charge+5, num_hs, radicals, hyb, arom, ring
    for name, col in [("atomic_num", 0), ("degree", 2), ("formal_charge", 3), ("num_hs", 4),
                      ("num_radical_electrons", 5), ("is_aromatic", 7), ("is_in_ring", 8)]:
        assert ours.x[:, ATOM[name]].tolist() == pyg.x[:, col].tolist(), name
    assert ours.edge_index.tolist() == pyg.edge_index.tolist()
    assert ours.edge_attr[:, BOND["is_conjugated"]].tolist() == pyg.edge_attr[:, 2].tolist()


@pytest.mark.parametrize("smiles,reason", [
    ("C(C", "syntax"), ("not_a_smiles", "syntax"), ("", "empty"), ("   ", "empty"),
    (None, "empty"), ("CC(=O)O[AlH3](O)O", "valence"), ("c1cccc1", "Kekulize")])
def test_invalid_smiles_raise_with_reason(smiles, reason, capfd):
    with pytest.raises(InvalidSmilesError) as info:
        smiles_to_data(smiles)
    assert isinstance(info.value, ValueError)
    assert reason.lower() in info.value.reason.lower()
    out, err = capfd.readouterr()
    assert out == "" and err == "", "RDKit console output must be silenced"


@pytest.mark.parametrize("smiles", ["CC O", "CCO\nCCN", "C1=CC=CC=C1 junk", "CCO\tC", "CCO |$;;$| name"])
def test_whitespace_inside_a_smiles_is_invalid(smiles):
    with pytest.raises(InvalidSmilesError) as info:
        smiles_to_data(smiles)
    assert info.value.reason == "whitespace inside the SMILES"


@pytest.mark.parametrize("smiles", ["CCO\u200b", "CCO\u00ae", "C\u00e9C", "CC\x00O"])
def test_characters_rdkit_would_drop_make_a_smiles_invalid(smiles):
    with pytest.raises(InvalidSmilesError, match="printable ASCII"):  # RDKit reads "CCO\u200b" as ethanol
        smiles_to_data(smiles)


def test_chirality_feature_is_the_same_for_every_spelling_of_a_molecule():
    col = molecules.ATOM_FEATURE_NAMES.index("chirality")

    def canonical_chirality(smiles):  # the chirality column in canonical atom order
        mol = Chem.MolFromSmiles(smiles)
        ranks = list(Chem.CanonicalRankAtoms(mol, breakTies=True))
        x = smiles_to_data(smiles).x[:, col].tolist()
        return [x[i] for i in sorted(range(len(x)), key=ranks.__getitem__)]

    l_ala, d_ala = "C[C@H](N)C(=O)O", "C[C@@H](N)C(=O)O"
    assert canonical_chirality(l_ala) == canonical_chirality("N[C@@H](C)C(=O)O")  # L-alanine twice
    assert canonical_chirality(l_ala) != canonical_chirality(d_ala)  # the chiral tag gave L one of D's values
    for smiles in ["C[C@H](N)C(=O)O", "O=C(O)[C@@H]1CCCN1C(=O)[C@H](C)CS", "C[C@@H]1CC[C@H](C(C)C)[C@@H](O)C1",
                   "F[C@H]1C[C@@H](F)C1"]:
        mol = Chem.MolFromSmiles(smiles)
        ref = canonical_chirality(smiles)
        assert any(v != 0 for v in ref)
        for spelling in Chem.MolToRandomSmilesVect(mol, 6, randomSeed=0):
            assert canonical_chirality(spelling) == ref


def _canonical(smiles, column="chirality"):
    """A feature column in canonical atom (or bond) order: comparable across spellings."""
    mol = Chem.MolFromSmiles(smiles)
    ranks = list(Chem.CanonicalRankAtoms(mol, breakTies=True))
    d = smiles_to_data(smiles)
    if column == "chirality":
        x = d.x[:, molecules.ATOM_FEATURE_NAMES.index(column)].tolist()
        return [x[i] for i in sorted(range(len(x)), key=ranks.__getitem__)]
    e = d.edge_attr[:, molecules.BOND_FEATURE_NAMES.index(column)].tolist()
    ends = [tuple(sorted((ranks[i], ranks[j]))) for i, j in d.edge_index.T.tolist()]
    return sorted(zip(ends, e))


def test_stereo_features_come_from_the_cip_labeller_whatever_rdkit_mode_or_edits():
    """CIP labels (featurizer version 4): pseudo-asymmetric ring centres (r / s) tell cis/trans
    ring isomers apart, RDKit's process-wide legacy/new stereo switch changes nothing, and a
    molecule edited after parsing is labelled as it is now, on a copy."""
    chi = molecules.ATOM_FEATURE_NAMES.index("chirality")
    stereo = molecules.BOND_FEATURE_NAMES.index("stereo")
    smiles = ["NC[C@H]1CC[C@@H](C(=O)O)CC1", "NC[C@H]1CC[C@H](C(=O)O)CC1",  # cis / trans tranexamic acid
              "C[C@H](N)C(=O)O", "C[C@@H](N)C(=O)O", "C/C=C/C", "C/C=C\\C", "F/C=C/[C@H](Cl)Br",
              "[H]/[NH+]=C(\\N)c1ccccc1", "C/C=C1/CC[C@H](C)CC1"]  # the switch changed these two

    def features():
        return [(smiles_to_data(s).x[:, chi].tolist(), smiles_to_data(s).edge_attr[:, stereo].tolist())
                for s in smiles]

    legacy = Chem.GetUseLegacyStereoPerception()
    try:
        Chem.SetUseLegacyStereoPerception(True)
        old = features()
        Chem.SetUseLegacyStereoPerception(False)
        new = features()
        assert not Chem.GetUseLegacyStereoPerception()  # the user's setting is left as it was
    finally:
        Chem.SetUseLegacyStereoPerception(legacy)
    assert old == new
    (cis, _), (trans, _), (l_ala, _), (d_ala, _), (_, e), (_, z), (mixed, mixed_b), (_, amidinium), _ = old
    assert sorted(set(cis) - {0}) == [4] and sorted(set(trans) - {0}) == [3]  # s, s vs r, r
    assert l_ala[1] == 2 and d_ala[1] == 1  # S, R
    assert set(e) == {0, 2} and set(z) == {0, 1}  # E, Z: the indices of STEREOE / STEREOZ before
    assert mixed[3] == 1 and 2 in mixed_b
    assert set(amidinium) == {0}  # =[NH2+] is no stereo bond (legacy perception flagged it Z)

    mol = Chem.MolFromSmiles("C[C@H](N)C(=O)O")  # L-alanine, then edited into D-alanine
    mol.GetAtomWithIdx(1).InvertChirality()
    assert molecules.mol_to_data(mol).x[1, chi] == 1  # R: as it is now, not the stale S
    assert mol.GetAtomWithIdx(1).GetProp("_CIPCode") == "S"  # the caller's molecule untouched
    hand = Chem.RWMol(Chem.MolFromSmiles("CC(N)C(=O)O"))  # built by hand, no perception
    hand.GetAtomWithIdx(1).SetChiralTag(Chem.ChiralType.CHI_TETRAHEDRAL_CCW)
    assert molecules.mol_to_data(hand).x[1, chi] == smiles_to_data("C[C@H](N)C(=O)O").x[1, chi]


def test_atropisomers_pseudo_asymmetric_bonds_and_enhanced_stereo():
    biaryl = "Cc1cccc(C(=O)O)c1-c1c(C)cccc1[N+](=O)[O-] |w{}:9.8|"
    p, m = _canonical(biaryl.format("U"), "stereo"), _canonical(biaryl.format("D"), "stereo")
    assert p != m  # enantiomeric axes: P vs M (both were "other")
    assert {v for _, v in p} == {0, 9} and {v for _, v in m} == {0, 8}
    # a pseudo-asymmetric double bond (z): the same for both spellings (not RDKit's relative cis flag)
    a, b = "C/C=C(/[C@H](C)F)[C@@H](C)F", "C(/C)=C(/[C@H](F)C)[C@@H](F)C"
    assert _canonical(a, "stereo") == _canonical(b, "stereo") and 6 in {v for _, v in _canonical(a, "stereo")}
    assert _canonical(a) == _canonical(b)
    # CXSMILES AND / OR groups: a racemate (or one of two) is not the enantiomer the tags spell
    other = molecules.ATOM_FEATURE_DIMS[molecules.ATOM_FEATURE_NAMES.index("chirality")] - 1
    for group in ("&1", "o1"):
        rac = [_canonical(f"C[C{t}H](N)C(=O)O |{group}:1|") for t in ("@", "@@")]
        assert rac[0] == rac[1] and other in rac[0]
        assert rac[0] != _canonical("C[C@H](N)C(=O)O")
    assert _canonical("C[C@H](O)[C@@H](C)F |&1:1,3|") == _canonical("C[C@@H](O)[C@H](C)F |&1:1,3|")
    racemic_axis = [_canonical(biaryl.format(w)[:-1] + ",&1:9|", "stereo") for w in ("U", "D")]
    assert racemic_axis[0] == racemic_axis[1] and 9 not in {v for _, v in racemic_axis[0]}  # not P
    assert 1 in _canonical("C[C@H](N)C(=O)O |a:1|") + _canonical("C[C@@H](N)C(=O)O |a:1|")  # ABS: kept
    # the duplicate key (DuplicateSmilesWarning, pretraining's de-duplication) tells them apart too
    key = molecules.canonical_key
    assert key(biaryl.format("U")) != key(biaryl.format("D"))
    assert key("C[C@H](N)C(=O)O |&1:1|") == key("C[C@@H](N)C(=O)O |&1:1|") != key("C[C@H](N)C(=O)O")
    assert key("C[C@H](N)C(=O)O") == key("N[C@@H](C)C(=O)O") == "C[C@H](N)C(=O)O"
    assert key("C[C@H](N)C(=O)O |a:1|") == key("C[C@H](N)C(=O)O")  # ABS: what the tags say anyway
    mixed = molecules.canonical_smiles(molecules.parse_smiles("C[C@H](O)[C@@H](C)F |a:1,&1:3|"), "")  # raised
    assert mixed == molecules.canonical_smiles(molecules.parse_smiles("C[C@H](O)[C@@H](C)F |&1:3|"), "")
    huge = "C" * (CANONICAL_MAX_ATOMS + 1)  # RDKit's canonical ranking segfaults at 20k atoms
    assert key(huge) == huge and molecules.canonical_smiles(molecules.parse_smiles(huge), "text") == "text"


def test_unsanitized_molecules_are_sanitized_on_a_copy_or_refused():
    raw = Chem.MolFromSmiles("c1ccccc1", sanitize=False)
    assert torch.equal(molecules.mol_to_data(raw).x, smiles_to_data("c1ccccc1").x)  # SP2, aromatic, ...
    assert raw.NeedsUpdatePropertyCache()  # the caller's molecule untouched
    with pytest.raises(ValueError, match="cannot be sanitized"):
        molecules.mol_to_data(Chem.MolFromSmiles("c1cccc1", sanitize=False))
    cached = Chem.MolFromSmiles("Oc1ccccc1", sanitize=False)
    cached.UpdatePropertyCache(strict=False)  # valences known, rings and aromaticity not perceived
    assert torch.equal(molecules.mol_to_data(cached).x, smiles_to_data("Oc1ccccc1").x)
    block = Chem.MolToMolBlock(Chem.MolFromSmiles("Oc1ccccc1"))
    ringed = Chem.MolFromMolBlock(block, sanitize=False)  # a mol block reader perceives rings, nothing else
    ringed.UpdatePropertyCache(strict=False)
    want = smiles_to_data("Oc1ccccc1")
    got = molecules.mol_to_data(ringed)
    assert torch.equal(got.x, want.x) and torch.equal(got.edge_attr, want.edge_attr)


def test_a_fragment_the_cip_labeller_gives_up_on_spoils_no_other(monkeypatch):
    real = rdCIPLabeler.AssignCIPLabels

    def flaky(mol, atomsToLabel=None, bondsToLabel=None, maxRecursiveIterations=0):
        if 3 in atomsToLabel:  # the first fragment's centre: "too symmetric"
            raise RuntimeError("Max Iterations Exceeded")
        return real(mol, atomsToLabel=atomsToLabel, bondsToLabel=bondsToLabel,
                    maxRecursiveIterations=maxRecursiveIterations)

    monkeypatch.setattr(rdCIPLabeler, "AssignCIPLabels", flaky)
    chi = molecules.ATOM_FEATURE_NAMES.index("chirality")
    d = smiles_to_data("F/C=C/[C@H](Cl)Br.N[C@@H](C)C(=O)O")
    assert d.x[3, chi] == molecules.ATOM_FEATURE_DIMS[chi] - 1  # given up: "other"
    assert d.x[7, chi] == 2  # L-alanine still S
    assert (d.edge_attr[:, molecules.BOND_FEATURE_NAMES.index("stereo")] == 2).sum() == 2  # RDKit's E kept
    # a fragment without stereo (water, a counter-ion) is no reason to label anything
    for extra in ("F/C=C/[C@H](Cl)Br.N[C@@H](C)C(=O)O.O", "F/C=C/[C@H](Cl)Br.O.N[C@@H](C)C(=O)O"):
        x = smiles_to_data(extra).x[:, chi]
        assert x[3] == molecules.ATOM_FEATURE_DIMS[chi] - 1 and 2 in x.tolist()
