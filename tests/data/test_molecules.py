"""Named MoleculeNet sets and SMILES CSVs as datasets (graphattn.data.moleculenet, graphattn.data.molecules): CSV layouts,
task columns, labels, the featurized cache, downloads and the shared Tox21 copy."""
import csv
import dataclasses
import gzip
import shutil
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("rdkit")

from tiny_inputs import SMILES, molecule_labels, write_csv, write_file  # noqa: E402
from torch_geometric.loader import DataLoader  # noqa: E402

import graphattn.data.download as download  # noqa: E402
from graphattn.data import (ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS, FEATURIZER_VERSION, MOLECULENET,  # noqa: E402
                            SIDER_TASKS, DataFileError, InvalidSmilesWarning, MoleculeCSVDataset, MoleculeNetDataset,
                            TaskColumnWarning, molecules, read_csv_table)
from graphattn.data.download import writable_dir  # noqa: E402
from graphattn.data.moleculenet import TOX21_TASKS, moleculenet_tasks  # noqa: E402
from graphattn.data.molecules import canonical_key  # noqa: E402
from graphattn.tasks.molecules import data as md  # noqa: E402
from graphattn.testing import requires_data, shared_data_dir  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# Tox21 file rows (1-based, header = row 1) with hypervalent [AlH3]; see shared/data/MANIFEST.md
TOX21_ALH3_ROWS = [1324, 2292, 2299, 3560, 4567, 4651, 5540, 6725]


def assert_in_range(x, dims):
    assert x.dtype == torch.long and x.size(1) == len(dims)
    assert (x >= 0).all()
    assert (x < torch.tensor(dims)).all()


# ----------------------------------------------------------------------------- CSV datasets

def load_csv(tmp_path, name, **kw):
    with pytest.warns(InvalidSmilesWarning, match=r"rows 4, 6, 8"):
        return MoleculeCSVDataset(FIXTURES / name, cache_dir=tmp_path, **kw)


@pytest.mark.parametrize("name", ["molecules_chemprop.csv", "molecules_deepchem.csv"])
def test_csv_dataset_skips_and_reports_invalid_rows(tmp_path, name):
    ds = load_csv(tmp_path, name)
    assert len(ds) == 6 and ds.num_rows == 9
    assert ds.task_names == ["task_a", "task_b"]  # DeepChem's text mol_id column ignored
    assert [s[0] for s in ds.skipped] == [4, 6, 8]
    assert [s[1] for s in ds.skipped] == ["not_a_smiles", "CC(=O)O[AlH3](O)O", ""]
    assert "valence" in ds.skipped[1][2].lower()
    assert ds.rows == [2, 3, 5, 7, 9, 10]
    assert ds.smiles == ["CCO", "c1ccccc1", "[Na+].[Cl-]", "C1CC1N",
                         "CC(C)Cc1ccc(cc1)C(C)C(=O)O", "OC(=O)c1ccccc1"]
    y = ds.y
    assert y.shape == (6, 2) and y.dtype == torch.float32
    assert torch.isnan(y).tolist() == [[False, False], [False, True], [True, False],
                                       [False, False], [False, False], [True, True]]
    assert y[0].tolist() == [1.0, 0.0]
    assert ds[2].edge_index.shape == (2, 0)  # Na+ Cl-: two atoms, no bond
    assert_in_range(ds.x, ATOM_FEATURE_DIMS)


def test_both_csv_layouts_give_identical_graphs(tmp_path):
    a = load_csv(tmp_path, "molecules_chemprop.csv")
    b = load_csv(tmp_path, "molecules_deepchem.csv")
    for key in ["x", "edge_index", "edge_attr"]:
        assert torch.equal(a._data[key], b._data[key])
    assert torch.allclose(a.y, b.y, equal_nan=True)


def test_csv_task_columns(tmp_path):
    ds = load_csv(tmp_path, "molecules_deepchem.csv", task_cols=["task_b", "task_a"])
    assert ds.task_names == ["task_b", "task_a"] and ds.y[0].tolist() == [0.0, 1.0]
    one = load_csv(tmp_path, "molecules_deepchem.csv", task_cols="task_b")
    assert one.task_names == ["task_b"] and one.y.shape == (6, 1)
    with pytest.raises(DataFileError, match="no column 'nope'"):
        MoleculeCSVDataset(FIXTURES / "molecules_chemprop.csv", task_cols=["nope"],
                           cache_dir=tmp_path)
    with pytest.raises(DataFileError, match="mol_id.*not a number"):
        MoleculeCSVDataset(FIXTURES / "molecules_deepchem.csv", task_cols=["mol_id"],
                           cache_dir=tmp_path)


def test_csv_inference_skips_numeric_id_columns_and_handles_gzip(tmp_path):
    src = tmp_path / "mine.csv.gz"
    with gzip.open(src, "wt", newline="") as f:
        f.write("id,SMILES,name,logS,active\n0,CCO,ethanol,-0.2,1\n1,CCN,ethylamine,NA,0\n")
    with pytest.warns(TaskColumnWarning, match=r"'logS' \(row 2 has '-0.2'"):  # continuous: not a BCE task
        ds = MoleculeCSVDataset(src, cache_dir=tmp_path / "cache", binary=True)  # smiles_col case-insensitive
    assert ds.task_names == ["active"]
    assert ds.skipped == [] and len(ds) == 2
    assert ds.y[:, 0].tolist() == [1.0, 0.0]


def test_csv_smiles_only_and_dataloader(tmp_path):
    src = tmp_path / "smiles.csv"
    src.write_text("smiles\nCCO\nc1ccccc1\n[Na+]\n")
    ds = MoleculeCSVDataset(src, cache_dir=tmp_path / "cache")
    assert ds.num_tasks == 0 and ds.y.shape == (3, 0)
    batch = next(iter(DataLoader(ds[torch.tensor([2, 0])], batch_size=2)))
    assert batch.num_graphs == 2 and batch.smiles == ["[Na+]", "CCO"]
    assert batch.x.shape == (4, 9) and batch.edge_index.shape == (2, 4)


def test_cache_is_reused_and_reprocessed_on_version_change(tmp_path, monkeypatch):
    src = tmp_path / "m.csv"
    shutil.copy(FIXTURES / "molecules_chemprop.csv", src)
    kw = dict(cache_dir=tmp_path / "cache")
    first = load_csv_path(src, kw)
    data_pt = Path(first.processed_paths[0])
    assert data_pt.is_file() and f"v{FEATURIZER_VERSION}-" in str(data_pt.parent.name)
    assert data_pt.parent.parent == tmp_path / "cache" / "csv" / "m" / "processed"
    stamp = data_pt.stat().st_mtime_ns

    calls = []
    monkeypatch.setattr(MoleculeCSVDataset, "process",
                        lambda self: calls.append(1) or molecules.SmilesCSVDataset.process(self))
    again = load_csv_path(src, kw)
    assert calls == [] and again.processed_paths == first.processed_paths
    assert data_pt.stat().st_mtime_ns == stamp

    monkeypatch.setattr(molecules, "FEATURIZER_VERSION", "999-test")
    bumped = load_csv_path(src, kw)
    assert calls == [1] and bumped.processed_dir != first.processed_dir
    assert Path(bumped.processed_dir).name.startswith("v999-test-")
    assert torch.equal(bumped.x, first.x)

    src.write_text(src.read_text() + "CCCC,1,1\n")  # raw file changed -> re-process
    changed = load_csv_path(src, kw)
    assert calls == [1, 1] and len(changed) == len(first) + 1

    load_csv_path(src, dict(kw, force_reload=True))
    assert len(calls) == 3


def load_csv_path(path, kw):
    with pytest.warns(InvalidSmilesWarning):
        return MoleculeCSVDataset(path, **kw)


def test_pre_transform_is_applied_and_keys_the_cache(tmp_path):
    class AddFlag:
        def __call__(self, data):
            data.flag = torch.ones(1)
            return data

    plain = load_csv(tmp_path, "molecules_chemprop.csv")
    flagged = load_csv(tmp_path, "molecules_chemprop.csv", pre_transform=AddFlag())
    assert flagged.processed_dir != plain.processed_dir
    assert flagged[0].flag.tolist() == [1.0] and "flag" not in plain[0]


def test_all_invalid_and_missing_files_fail_clearly(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("smiles,y\nxyz,1\n(((,0\n")
    with pytest.raises(DataFileError, match="none of its 2 SMILES"):
        MoleculeCSVDataset(bad, cache_dir=tmp_path)
    with pytest.raises(DataFileError, match="no such file"):
        MoleculeCSVDataset(tmp_path / "absent.csv", cache_dir=tmp_path)
    with pytest.raises(DataFileError, match="no column 'smiles'"):
        bad.write_text("mol,y\nCCO,1\n")
        MoleculeCSVDataset(bad, cache_dir=tmp_path)


# ----------------------------------------------------------------------------- toxicity sets

def write_fake(path: Path, name: str, n: int, deepchem: bool = False) -> Path:
    """A synthetic file in the layout of MoleculeNet dataset ``name`` with ``n`` rows."""
    tasks = MOLECULENET[name].tasks
    tasks = [f"assay_{i}" for i in range(tasks)] if isinstance(tasks, int) else list(tasks)
    header = tasks + ["mol_id", "smiles"] if deepchem else ["smiles"] + tasks
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for i in range(n):
            labels = [str((i + j) % 2) if (i + j) % 5 else "" for j in range(len(tasks))]
            smiles = ["CCO", "c1ccccc1", "CC(=O)O"][i % 3]
            w.writerow(labels + [f"ID{i}", smiles] if deepchem else [smiles] + labels)
    return path


def test_toxicity_name_is_checked():
    with pytest.raises(ValueError, match="tox21"):
        MoleculeNetDataset(name="tox22")


def test_truncated_or_wrong_file_fails_with_clear_message(tmp_path):
    write_fake(tmp_path / "tox21" / "tox21.csv", "tox21", 100)
    with pytest.raises(DataFileError, match=r"tox21\.csv: found 100 molecule rows, expected"):
        MoleculeNetDataset(root=tmp_path, name="tox21", cache_dir=tmp_path, download=False)

    path = write_fake(tmp_path / "t2" / "tox21" / "tox21.csv", "tox21", 7831)
    path.write_text(path.read_text()[:-20])  # cut inside the last row
    with pytest.raises(DataFileError, match=r"row 7832 has \d+ fields"):
        MoleculeNetDataset(root=tmp_path / "t2", name="tox21", download=False)

    gz = write_fake(tmp_path / "t3" / "tox21" / "tox21.csv.gz", "tox21", 7831)
    gz.write_bytes(gz.read_bytes()[: gz.stat().st_size // 2])
    with pytest.raises(DataFileError, match=r"tox21\.csv\.gz.*truncated or corrupt"):
        MoleculeNetDataset(root=tmp_path / "t3", name="tox21", download=False)

    wrong = tmp_path / "t4" / "clintox" / "clintox.csv"
    wrong.parent.mkdir(parents=True)
    wrong.write_text("smiles,p_np\nCCO,1\n")
    with pytest.raises(DataFileError, match=r"missing task columns \['FDA_APPROVED', 'CT_TOX'\]"):
        MoleculeNetDataset(root=tmp_path / "t4", name="clintox", download=False)


def test_missing_file_without_download_names_the_root(tmp_path):
    with pytest.raises(DataFileError, match="sider/sider.csv.gz"):
        MoleculeNetDataset(root=tmp_path, name="sider", download=False)


def test_download_goes_to_canonical_url_and_is_checked(tmp_path, monkeypatch):
    seen = []

    def fake_download(url, dest, sha256=None, check=None, progress=True, git_blob=None):
        seen.append((url, Path(dest)))
        write_fake(Path(dest), "sider", 1427, deepchem=False)
        check(Path(dest))
        return Path(dest)

    monkeypatch.setattr(download, "download_url", fake_download)
    ds = MoleculeNetDataset(root=tmp_path, name="sider", cache_dir=tmp_path / "cache")
    assert seen == [("https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/sider.csv.gz",
                     tmp_path / "sider" / "sider.csv.gz")]
    assert len(ds) == 1427 and ds.num_tasks == 27 and ds.skipped == []
    assert ds.task_names[0] == "Hepatobiliary disorders"


@pytest.mark.parametrize("name,fname,num_tasks", [
    ("toxcast", "toxcast_data.csv.gz", 617), ("toxcast", "toxcast.csv.gz", 617),
    ("clintox", "clintox.csv.gz", 2), ("clintox", "clintox.csv", 2)])
def test_each_accepted_name_and_layout(tmp_path, monkeypatch, name, fname, num_tasks):
    monkeypatch.setitem(MOLECULENET, name, dataclasses.replace(MOLECULENET[name], rows=(9, 9)))  # keep the test fast
    for deepchem in (False, True):
        root = tmp_path / str(deepchem)
        write_fake(root / name / fname, name, 9, deepchem=deepchem)
        ds = MoleculeNetDataset(root=root, name=name, download=False, log=False)
        assert len(ds) == 9 and ds.num_tasks == num_tasks and "mol_id" not in ds.task_names
        assert ds.raw_path.name == fname


# ----------------------------------------------------------------------------- real Tox21

@pytest.fixture(scope="module")
def tox21(tmp_path_factory):
    with pytest.warns(InvalidSmilesWarning, match="skipped 8 of 7831"):
        return MoleculeNetDataset(root=shared_data_dir(), name="tox21",
                               cache_dir=tmp_path_factory.mktemp("cache"), download=False)


def read_tox21_rows():
    with gzip.open(shared_data_dir() / "tox21" / "tox21.csv.gz", "rt", newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        return header, {reader.line_num: row for row in reader}


@requires_data("tox21/tox21.csv.gz")
def test_real_tox21(tox21):
    assert len(tox21) == 7831 - 8 and tox21.num_rows == 7831
    assert tox21.task_names == TOX21_TASKS
    assert [s[0] for s in tox21.skipped] == TOX21_ALH3_ROWS  # decision: skip, not sanitize=False
    assert all("[AlH3]" in s[1] and "valence" in s[2] for s in tox21.skipped)
    assert tox21.y.shape == (7823, 12)
    assert_in_range(tox21.x, ATOM_FEATURE_DIMS)
    assert_in_range(tox21.edge_attr, BOND_FEATURE_DIMS)

    header, rows = read_tox21_rows()
    kept = [rows[r] for r in tox21.rows]
    assert tox21.smiles == [r[0] for r in kept]
    expected = torch.tensor([[float(v) if v else float("nan") for v in r[1:]] for r in kept])
    assert torch.allclose(tox21.y, expected, equal_nan=True)
    present = (~torch.isnan(tox21.y)).sum().item()
    skipped_present = sum(v != "" for r in TOX21_ALH3_ROWS for v in rows[r][1:])
    assert present == 77946 - skipped_present  # MANIFEST: 77,946 labels present


@pytest.mark.slow  # re-featurizes all of Tox21 (~8 s); the fixture CSVs cover the layout fast
@requires_data("tox21/tox21.csv.gz")
def test_real_tox21_deepchem_layout_matches(tox21, tmp_path):
    header, rows = read_tox21_rows()
    dest = tmp_path / "tox21" / "tox21.csv.gz"
    dest.parent.mkdir()
    with gzip.open(dest, "wt", newline="") as f:  # DeepChem: 12 tasks, mol_id, smiles
        w = csv.writer(f)
        w.writerow(header[1:] + ["mol_id", "smiles"])
        for line in sorted(rows):
            w.writerow(rows[line][1:] + [f"TOX{line}", rows[line][0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InvalidSmilesWarning)
        dc = MoleculeNetDataset(root=tmp_path, name="tox21", download=False, log=False)
    assert dc.task_names == tox21.task_names and dc.rows == tox21.rows
    for key in ["x", "edge_index", "edge_attr"]:
        assert torch.equal(dc._data[key], tox21._data[key])
    assert torch.allclose(dc.y, tox21.y, equal_nan=True)


def test_inference_keeps_binary_columns_and_names_the_others_in_one_warning(tmp_path):
    rows = [(s, i + 101, f"{0.1 * i:.1f}", "O" if i == 5 else str(molecule_labels(s)[0]), "",
             ["0.0", "1.0", ""][i % 3], ["True", "false", "TRUE"][i % 3], molecule_labels(s)[1])
            for i, s in enumerate(SMILES[:9])]
    src = write_csv(tmp_path / "m.csv", ["smiles", "cid", "conc", "typo", "empty", "floats", "bools", "act"], rows)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False, binary=True)
    assert ds.task_names == ["floats", "bools", "act"]
    assert ds.y[:3, :2].tolist()[:2] == [[0.0, 1.0], [1.0, 0.0]] and torch.isnan(ds.y[2, 0])
    msgs = [str(w.message) for w in caught if issubclass(w.category, TaskColumnWarning)]
    assert len(msgs) == 1
    msg = msgs[0]
    assert "'conc' (row 3 has '0.1'" in msg  # row 2: 0.0 is fine
    assert "cid" not in msg and dict(ds.skipped_columns)["cid"] == "id/name column"  # an identifier
    assert "'typo' (row 7 has 'O'" in msg and "'empty' (every cell empty)" in msg
    assert dict(ds.skipped_columns)["typo"].startswith("row 7 has 'O'")


@pytest.mark.parametrize("bad", ["-1", "0.5", "2", "inf", "-inf", "yes"])
def test_explicit_task_with_non_binary_label_names_column_row_and_value(tmp_path, bad):
    src = write_csv(tmp_path / "m.csv", ["smiles", "y"], [("CCO", "1"), ("CCN", ""), ("CCC", bad)])
    with pytest.raises(ValueError, match=rf"row 4, column 'y': label '{bad}' is not .*binary"):
        MoleculeCSVDataset(src, task_cols=["y"], cache_dir=tmp_path / "c", log=False, binary=True)


@pytest.mark.usefixtures("private_cache")
def test_shared_toxicity_sets_keep_their_task_counts():
    root = shared_data_dir()
    if root is None or not (root / "clintox").is_dir():
        pytest.skip("shared clintox not available")
    ds = MoleculeNetDataset(root=root, name="clintox", download=False, log=False, limit=25)
    assert ds.task_names == ["FDA_APPROVED", "CT_TOX"] and len(ds) == 25


@pytest.mark.usefixtures("private_cache")
def test_limit_featurizes_only_the_first_molecules_and_keeps_caches_apart(tmp_path, monkeypatch):
    rows = [(s, *molecule_labels(s)) for s in SMILES[:3]] + [("C(", 0, 0)] + [(s, *molecule_labels(s)) for s in SMILES[3:20]]
    src = write_csv(tmp_path / "l.csv", ["smiles", "toxic", "active"], rows)
    calls = []
    real = molecules.smiles_to_data
    monkeypatch.setattr(molecules, "smiles_to_data", lambda *a: calls.append(a[0]) or real(*a))
    with pytest.warns(molecules.InvalidSmilesWarning, match="skipped 1 of 5"):
        small = MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False, limit=4)
    assert len(small) == 4 and small.num_rows == 5 and len(calls) == 5 and small.smiles == SMILES[:4]
    with pytest.warns(molecules.InvalidSmilesWarning, match="skipped 1 of 21"):
        full = MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False)
    assert len(full) == 20 and full.processed_dir != small.processed_dir  # not the limited cache
    calls.clear()
    with pytest.warns(molecules.InvalidSmilesWarning):
        again = MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False, limit=4)
    assert calls == [] and len(again) == 4  # its own cache, untouched by the full run
    ds = md.load_dataset(csv_path=str(src), limit=2, log=False)
    assert len(ds) == 2 and ds.num_rows == 2


def test_limit_on_a_named_dataset(tmp_path, monkeypatch):
    monkeypatch.setitem(MOLECULENET, "clintox", dataclasses.replace(MOLECULENET["clintox"], rows=(40, 40)))
    write_csv(tmp_path / "clintox" / "clintox.csv", ["smiles", "FDA_APPROVED", "CT_TOX"],
              [(s, *molecule_labels(s)) for s in SMILES])
    calls = []
    real = molecules.smiles_to_data
    monkeypatch.setattr(molecules, "smiles_to_data", lambda *a: calls.append(a[0]) or real(*a))
    ds = MoleculeNetDataset(root=tmp_path, name="clintox", cache_dir=tmp_path / "c", log=False, limit=6)
    assert len(ds) == 6 and len(calls) == 6


@pytest.mark.usefixtures("private_cache")
def test_identifier_columns_are_never_inferred_as_tasks(tmp_path):
    rows = [(100 + i, s, f"ID-{i}", 46.07 + i, molecule_labels(s)[0], 7 + i) for i, s in enumerate(SMILES[:10])]
    src = write_csv(tmp_path / "ids.csv", ["CID", "smiles", "Compound ID", "MW", "active", "PubChem_CID"], rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = MoleculeCSVDataset(src, log=False)
    assert ds.task_names == ["MW", "active"]  # numeric labels by default; identifiers never
    assert {c for c, why in ds.skipped_columns if why == "id/name column"} == {"CID", "Compound ID", "PubChem_CID"}


@pytest.mark.usefixtures("private_cache")
def test_duplicate_smiles_are_reported(tmp_path):
    rows = [(s, molecule_labels(s)[0]) for s in SMILES[:6]] + [(SMILES[1], 0), (SMILES[2] + " ", 1)]
    with pytest.warns(molecules.DuplicateSmilesWarning, match=r"2 rows repeat.*rows 3=8, 4=9"):
        MoleculeCSVDataset(write_csv(tmp_path / "dup.csv", ["smiles", "y"], rows), log=False)


def test_toxicity_files_in_flat_raw_or_given_directly(tmp_path):
    shared = shared_data_dir()
    src = None if shared is None else shared / "tox21" / "tox21.csv.gz"
    if src is None or not src.is_file():
        pytest.skip("tox21 not under $GRAPHATTN_DATA")

    for rel in ("flat/tox21.csv.gz", "pyg/tox21/raw/tox21.csv.gz"):
        dest = tmp_path / rel
        dest.parent.mkdir(parents=True)
        shutil.copyfile(src, dest)
        root = tmp_path / rel.split("/")[0]
        ds = MoleculeNetDataset(root, "tox21", download=False, log=False, limit=5, cache_dir=tmp_path / "c")
        assert Path(ds.raw_path) == dest and len(ds) == 5
    ds = MoleculeNetDataset(tmp_path / "flat" / "tox21.csv.gz", "tox21", download=False, log=False, limit=5,
                         cache_dir=tmp_path / "c")
    assert len(ds) == 5


def test_toxcast_resaved_with_an_index_column(tmp_path):
    shared = shared_data_dir()
    src = None if shared is None else shared / "toxcast" / "toxcast.csv.gz"
    if src is None or not src.is_file():
        pytest.skip("toxcast not under $GRAPHATTN_DATA")
    with gzip.open(src, "rt", newline="") as f:
        table = list(csv.reader(f))
    write_csv(tmp_path / "toxcast" / "toxcast.csv", ["Unnamed: 0", *table[0]],
              [[i, *r] for i, r in enumerate(table[1:])])  # pandas' to_csv() with its index
    ds = MoleculeNetDataset(tmp_path, "toxcast", download=False, log=False, limit=3, cache_dir=tmp_path / "c")
    assert ds.num_tasks == 617 and "Unnamed: 0" not in ds.task_names


def test_excel_placeholders_are_missing_labels_and_delimiter_hints(tmp_path):
    src = tmp_path / "x.csv"
    src.write_text("smiles,tox\nCCO,1\nCCN,#N/A\nCCC,?\nCCCC,0\n")
    ds = MoleculeCSVDataset(src, cache_dir=tmp_path / "c", log=False)
    assert ds.task_names == ["tox"] and torch.isnan(ds.y[1:3]).all() and ds.y[[0, 3]].flatten().tolist() == [1, 0]
    (tmp_path / "semi.csv").write_text("smiles;tox\nCCO;1,5\n")  # European Excel: decimal commas
    with pytest.raises(DataFileError, match="separated by semicolons"):
        read_csv_table(tmp_path / "semi.csv")
    assert canonical_key("C" * 6000) == "C" * 6000  # no canonical ranking of huge chains (RDKit segfaults)


def test_unwritable_caches_are_named(tmp_path, monkeypatch):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.warns(UserWarning, match="not writable; processing into"):
        assert writable_dir(blocker, "csv/x") == tmp_path / "home" / ".cache" / "graphattn" / "csv" / "x"
    monkeypatch.setenv("HOME", str(blocker))  # the fallback cannot be made either
    with pytest.raises(DataFileError, match="GRAPHATTN_CACHE"):
        writable_dir(blocker, "csv/x")


@pytest.mark.parametrize("text,msg", [("smiles,y\n", "no data rows"),
                                      ("smiles;y\nCCO;1\n", "separated by semicolons"),
                                      ("smiles\ty\nCCO\t1\n", "separated by tabs: name the file .tsv")])
def test_molecule_csv_messages(tmp_path, text, msg):
    with pytest.raises(DataFileError, match=msg):
        MoleculeCSVDataset(write_file(tmp_path / "m.csv", text), cache_dir=tmp_path / "c", log=False)


def test_molecule_csv_not_utf8(tmp_path):
    f = tmp_path / "m.csv"
    f.write_bytes("smiles,y,name\nCCO,1,caf\u00e9\n".encode("cp1252"))
    with pytest.raises(DataFileError, match="not UTF-8 text"):
        MoleculeCSVDataset(f, cache_dir=tmp_path / "c", log=False)


def test_moleculenet_file_with_upper_case_smiles_header(tmp_path):
    assert moleculenet_tasks("sider", ["SMILES", *SIDER_TASKS], tmp_path / "sider.csv") == list(SIDER_TASKS)
    with pytest.raises(DataFileError, match="no 'smiles' column"):
        moleculenet_tasks("sider", ["mol", *SIDER_TASKS], tmp_path / "sider.csv")
