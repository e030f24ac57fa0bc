"""ZINC-12k: the official target, the builder from the upstream files, and ``MoleculeNetDataset(name="zinc")``."""
import dataclasses
import gzip
import shutil

import pytest

from graphattn.data import MOLECULENET, DataFileError, MoleculeNetDataset, build_zinc_subset, zinc_target
from graphattn.data import zinc
from graphattn.testing import requires_data, shared_data_dir

ZINC = "zinc_subset"
SHARED_FILES = [f"{ZINC}/{f}" for f in ("zinc_subset.csv.gz", "jtvae_valid.txt.gz", "jtvae_test.txt.gz",
                                        "val.index", "test.index")]
#: the one val/test row where the shared CSV's cycle term is not that of JT-VAE's networkx call: its
#: fused tricycle's adjacency-matrix cycle basis holds a 12-cycle (cycle term 6); the CSV has 0
SHARED_CYCLE_DIFFERS = {"CCCCCCNC(=O)c1c([O-])n2c3c(cccc3c1=O)CCC2"}


def shared_rows():
    """``(smiles, target text, split)`` of the shared CSV, in file order."""
    with gzip.open(shared_data_dir() / ZINC / "zinc_subset.csv.gz", "rt") as f:
        lines = f.read().splitlines()
    assert lines[0] == "smiles,logP_SA_cycle_normalized,split"
    return [tuple(line.split(",")) for line in lines[1:]]


def test_zinc_target_of_the_first_zinc_full_val_and_test_molecules():
    pytest.importorskip("rdkit")
    from rdkit import Chem

    assert zinc_target("CCN(Cc1ccc(OC)c(OC)c1)C(=O)c1ccsc1") == pytest.approx(2.1017, abs=1e-3)
    assert zinc_target(Chem.MolFromSmiles("CC(C)(C)c1ccc2occ(CC(=O)Nc3ccccc3F)c2c1")) == pytest.approx(3.1399, abs=1e-3)
    with pytest.raises(ValueError, match="RDKit cannot read"):
        zinc_target("C1CC")


def test_largest_basis_cycle_is_the_ring_size_of_networkx_cycle_basis():
    pytest.importorskip("rdkit")
    nx = pytest.importorskip("networkx")
    from rdkit import Chem
    from rdkit.Chem import rdmolops

    smiles = ["CCO", "c1ccccc1", "C1CCCCCCC1.C1CC1", "C12CC3CC(CC(C3)C1)C2", *SHARED_CYCLE_DIFFERS]
    if shared_data_dir() is not None and (shared_data_dir() / SHARED_FILES[0]).is_file():
        smiles += [s for s, _, part in shared_rows() if part != "train"]
    for s in smiles:
        mol = Chem.MolFromSmiles(s)
        basis = nx.cycle_basis(nx.Graph(rdmolops.GetAdjacencyMatrix(mol)))  # JT-VAE's call
        assert zinc.largest_basis_cycle(mol) == max(map(len, basis), default=0), s
    mol = Chem.MolFromSmiles(next(iter(SHARED_CYCLE_DIFFERS)))
    assert zinc.largest_basis_cycle(mol) == 12 and max(map(len, mol.GetRingInfo().AtomRings())) == 6


@requires_data(*SHARED_FILES)
def test_zinc_target_reproduces_the_shared_val_and_test_targets():
    pytest.importorskip("rdkit")
    rows = [r for r in shared_rows() if r[2] != "train"]
    assert len(rows) == 2000
    differ = {s for s, y, _ in rows if abs(zinc_target(s) - float(y)) > 1e-4}
    assert differ == SHARED_CYCLE_DIFFERS


def zinc_root(tmp_path, monkeypatch, train=True):
    """A data root with the shared JT-VAE files (local), the val/test index files served by file://
    URLs (downloaded, git blob checked) and a tiny stand-in train.txt / train.index."""
    shared, folder, remote = shared_data_dir() / ZINC, tmp_path / "data" / ZINC, tmp_path / "remote"
    folder.mkdir(parents=True)
    remote.mkdir()
    for name in ("jtvae_valid.txt.gz", "jtvae_test.txt.gz"):
        (folder / name).symlink_to(shared / name)
    for part in ("val", "test"):
        shutil.copy(shared / f"{part}.index", remote / f"{part}.index")
        smiles_src, index_src = zinc.ZINC_SOURCES[part]
        index_src = dataclasses.replace(index_src, url=(remote / f"{part}.index").as_uri())
        monkeypatch.setitem(zinc.ZINC_SOURCES, part, (smiles_src, index_src))
    smiles_src, index_src = zinc.ZINC_SOURCES["train"]
    monkeypatch.setitem(zinc.ZINC_SOURCES, "train", (dataclasses.replace(smiles_src, count=4),
                                                     dataclasses.replace(index_src, count=3)))
    if train:
        (folder / "train.txt").write_text("CCO\nc1ccccc1O\nCC(=O)Nc1ccccc1\nC1CCCCCCC1\n")
        (folder / "train.index").write_text("3,0,2\r\n")
    return tmp_path / "data"


@requires_data(*SHARED_FILES)
def test_the_builder_rebuilds_the_shared_val_and_test_blocks(tmp_path, monkeypatch):
    pytest.importorskip("rdkit")
    root = zinc_root(tmp_path, monkeypatch)
    path = build_zinc_subset(root, progress=False)
    assert path == root / ZINC / "zinc_subset.csv.gz" and (root / ZINC / "val.index").is_file()  # downloaded
    with gzip.open(path, "rt", newline="") as f:
        lines = f.read().split("\n")
    assert lines[0] == "smiles,logP_SA_cycle_normalized,split" and lines[-1] == ""
    built = [tuple(line.split(",")) for line in lines[1:-1]]
    assert [(s, part) for s, _, part in built[:3]] == [("C1CCCCCCC1", "train"), ("CCO", "train"),
                                                       ("CC(=O)Nc1ccccc1", "train")]
    assert float(built[0][1]) == pytest.approx(zinc_target("C1CCCCCCC1"), abs=1e-6)
    expected = [r for r in shared_rows() if r[2] != "train"]
    assert [(s, part) for s, _, part in built[3:]] == [(s, part) for s, _, part in expected]
    differ = {b[0] for b, e in zip(built[3:], expected) if b[1] != e[1]}  # the same six-decimal text
    assert differ == SHARED_CYCLE_DIFFERS
    before = path.stat().st_mtime_ns
    assert build_zinc_subset(root, download=False) == path and path.stat().st_mtime_ns == before  # kept


@requires_data(*SHARED_FILES)
def test_without_train_txt_offline_the_error_says_what_to_put_where(tmp_path, monkeypatch):
    root = zinc_root(tmp_path, monkeypatch, train=False)
    with pytest.raises(DataFileError) as err:
        build_zinc_subset(root, download=False, progress=False)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("train.txt (https://raw.githubusercontent.com/wengong-jin/")
    assert f"put it at {root / ZINC / 'train.txt'}" in msg and "same-source substitute" in msg
    missing = (tmp_path / "nowhere" / "train.txt").as_uri()  # offline: the download fails
    smiles_src, index_src = zinc.ZINC_SOURCES["train"]
    monkeypatch.setitem(zinc.ZINC_SOURCES, "train", (dataclasses.replace(smiles_src, url=missing), index_src))
    offline = r"^train\.txt .* is missing and downloading file://.* failed .*: put it at"
    with pytest.raises(DataFileError, match=offline):
        build_zinc_subset(root, progress=False)
    with pytest.raises(DataFileError, match="train.txt .* is missing and downloads are disabled"):
        MoleculeNetDataset(root=root, name="zinc", download=False, log=False, cache_dir=tmp_path / "cache")
    assert not (root / ZINC / "zinc_subset.csv.gz").exists()


@requires_data(*SHARED_FILES)
def test_a_truncated_source_file_is_named(tmp_path, monkeypatch):
    root = zinc_root(tmp_path, monkeypatch)
    (root / ZINC / "train.index").write_text("0,1,7\n")
    with pytest.raises(DataFileError, match=r"train\.index: 1 ids beyond its 4 SMILES \(first 7\)"):
        build_zinc_subset(root, progress=False)
    (root / ZINC / "val.index").write_text(",".join(map(str, range(999))) + "\n")
    with pytest.raises(DataFileError, match=r"val\.index: 999 molecule ids, expected 1,000"):
        build_zinc_subset(root, progress=False)
    assert not (root / ZINC / "zinc_subset.csv.gz").exists()


def test_the_dataset_builds_a_missing_file_and_checks_its_split_sizes(tmp_path, monkeypatch):
    pytest.importorskip("rdkit")
    calls = []

    def build(root, download, progress):
        calls.append((root, download, progress))
        path = root / "zinc_subset" / "zinc_subset.csv.gz"
        path.parent.mkdir(parents=True)
        path.write_bytes(gzip.compress(b"smiles,logP_SA_cycle_normalized,split\nCCO,0.5,train\nCCN,-1.25,train\n"
                                       b"c1ccccc1,2.0,val\nCC(=O)O,0.0,test\n"))
        return path

    spec = dataclasses.replace(MOLECULENET["zinc"], rows=(4, 4), split_sizes=(2, 1, 1), build=build)
    monkeypatch.setitem(MOLECULENET, "zinc", spec)
    ds = MoleculeNetDataset(root=tmp_path, name="zinc", download=False, log=False, cache_dir=tmp_path / "cache")
    assert calls == [(tmp_path, False, False)] and len(ds) == 4 and ds.split_labels == ["train", "train", "val", "test"]
    assert ds[1].y.tolist() == [[-1.25]]
    MoleculeNetDataset(root=tmp_path, name="zinc", log=False, cache_dir=tmp_path / "cache")
    assert len(calls) == 1  # the file exists now: not built again
    monkeypatch.setitem(MOLECULENET, "zinc", dataclasses.replace(spec, split_sizes=(3, 0, 1)))
    with pytest.raises(DataFileError, match=r"'split' holds train/val/test 2/1/1 molecules, expected 3/0/1 for zinc"):
        MoleculeNetDataset(root=tmp_path, name="zinc", log=False, cache_dir=tmp_path / "cache")


@requires_data(*SHARED_FILES)
def test_zinc_by_name_from_the_shared_copy(tmp_path):
    pytest.importorskip("rdkit")
    ds = MoleculeNetDataset(root=shared_data_dir(), name="zinc", cache_dir=tmp_path, download=False, log=False)
    assert ds.raw_path == shared_data_dir() / ZINC / "zinc_subset.csv.gz"
    assert len(ds) == 12000 and not ds.skipped
    assert ds.task_names == ["logP_SA_cycle_normalized"] and ds.task_type == "regression"
    parts = ds.split_labels
    assert (parts.count("train"), parts.count("val"), parts.count("test")) == (10000, 1000, 1000)
    rows = shared_rows()
    assert ds.smiles[10000] == rows[10000][0] and ds[10000].y.item() == pytest.approx(float(rows[10000][1]), abs=1e-6)
