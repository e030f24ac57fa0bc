"""--device: auto / cpu / cuda[:N] for every train command (molecules, pretraining, social node
and graph sets); a GPU that is not there is a clear error, never a silent CPU run. The CUDA
tests run where a GPU is and skip elsewhere."""
import importlib.util
from collections import namedtuple

import pytest
import torch

import graphattn.cli.molecules_train
import graphattn.cli.pretrain
import graphattn.cli.social_train_graph
import graphattn.tasks.social.node
from graphattn.cli.main import main
from graphattn.tasks.social.predict import load_social, node_data
from graphattn.tasks.social import node as sn
from graphattn.train import load_checkpoint, model_device, resolve_device, save_checkpoint
from graphattn.train.checkpoint import on_cpu

from tiny_inputs import write_tu_text

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_auto_is_the_gpu_when_there_is_one(monkeypatch, no_gpu):
    assert resolve_device(None) == resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert resolve_device("cpu:1") == torch.device("cpu")  # one CPU, whatever the index


def test_missing_or_unknown_devices_are_errors(monkeypatch, no_gpu):
    with pytest.raises(ValueError, match="no CUDA GPU is available"):
        resolve_device("cuda")
    for bad in ("banana", "tpu", "meta", "cuda:x"):
        with pytest.raises(ValueError, match="--device must be auto, cpu, cuda or cuda:N"):
            resolve_device(bad)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(ValueError, match=r"only 1 CUDA GPU\(s\) here"):
        resolve_device("cuda:3")


@pytest.mark.parametrize("argv", [
    ["train", "karate", "--epochs", "1"],                           # social node set
    ["train", "--tu-text", "TOY", "--epochs", "1"],                 # social graph set
    ["train", "--csv", "MOL", "--epochs", "1"],                     # molecules
    ["pretrain", "--csv", "MOL", "--epochs", "1"],                  # pretraining
])
def test_cli_refuses_a_gpu_that_is_not_there_before_loading_data(argv, tmp_path, capsys, monkeypatch, no_gpu):
    def loaded(*a, **k):
        raise AssertionError("data was loaded before --device was checked")

    for mod, name in ((graphattn.tasks.social.node, "load_node_graph"), (graphattn.cli.social_train_graph, "load_graphs"),
                      (graphattn.cli.molecules_train, "load_dataset"), (graphattn.cli.pretrain, "molecule_pool")):
        monkeypatch.setattr(mod, name, loaded)
    files = {"TOY": write_tu_text(tmp_path / "TOY.txt"), "MOL": tmp_path / "m.csv"}
    (tmp_path / "m.csv").write_text("smiles,a\nCCO,1\nCCN,0\nCCC,1\nc1ccccc1,0\n")
    argv = [str(files.get(a, a)) for a in argv] + ["--out", str(tmp_path / "out"), "--device", "cuda"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--device cuda: no CUDA GPU is available" in err and "Traceback" not in err


def test_distributed_takes_the_gpu_of_its_local_rank(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert main(["train", "karate", "--distributed", "--device", "cuda:1", "--epochs", "1"]) == 2
    assert "each torchrun process uses the GPU of its LOCAL_RANK" in capsys.readouterr().err


def test_explicit_cpu_trains_node_mini_batch_and_graph_sets(tmp_path):
    # batches are moved to the model's device: on the CPU that is a copy-free .to(), but it
    # must keep the mini-batch partition key hashable (Data.to turns a tuple into a list)
    assert main(["train", "karate", "--device", "cpu", "--mini-batch", "--epochs", "2", "--no-progress",
                 "--out", str(tmp_path / "k")]) == 0
    txt = write_tu_text(tmp_path / "TOY.txt")
    assert main(["train", "--tu-text", str(txt), "--device", "cpu", "--epochs", "2", "--batch-size", "8",
                 "--no-progress", "--out", str(tmp_path / "g")]) == 0


@cuda
def test_cuda_runs_every_training_path_and_checkpoints_are_saved_on_the_cpu(tmp_path, capsys):
    runs = {"k": ["karate", "--label-input", "--consistency", "2"], "m": ["karate", "--mini-batch"],
            "g": ["--tu-text", str(write_tu_text(tmp_path / "TOY.txt")), "--batch-size", "8", "--folds", "2"]}
    if importlib.util.find_spec("rdkit") is not None:  # molecules too where RDKit is installed
        mol = tmp_path / "m.csv"
        mol.write_text("smiles,a,b\n" + "".join(f"{s},{i % 2},{(i // 2) % 2}\n" for i, s in enumerate(
            ["CCO", "CCN", "CCC", "c1ccccc1", "CC(=O)O", "CCCl", "c1ccncc1", "OCCO", "CC#N", "CCOC"] * 2)))
        runs["e"] = ["--csv", str(mol), "--split", "random", "--ensemble", "2", "--pos-weight"]
    for out, extra in runs.items():
        argv = ["train", *extra, "--device", "cuda", "--epochs", "3", "--no-progress", "--out", str(tmp_path / out)]
        assert main(argv) == 0
        ck = torch.load(tmp_path / out / "best.pt", weights_only=True)  # no map_location
        assert all(t.device.type == "cpu" for t in ck["model"].values())
        assert main(["evaluate", "--checkpoint", str(tmp_path / out / "best.pt")]) == 0
        assert main(argv[:-7] + ["--device", "cuda", "--epochs", "5", "--no-progress", "--out",
                                 str(tmp_path / out), "--resume"]) == 0  # optimizer state back onto the GPU
    assert "test acc" in capsys.readouterr().out


def test_whole_graph_logits_fall_back_to_the_cpu_when_the_gpu_is_full(tmp_path, monkeypatch):
    assert main(["train", "karate", "--epochs", "2", "--no-progress", "--out", str(tmp_path)]) == 0
    _, meta, model = load_social(tmp_path / "best.pt")
    data = node_data(meta)
    want = sn.node_logits(model, meta["model"], data)
    real, calls = sn.run_model, []

    def full_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(sn, "run_model", full_once)
    with pytest.warns(UserWarning, match="does not fit in the GPU's memory"):
        got = sn.node_logits(model, meta["model"], data)
    assert len(calls) == 2 and torch.equal(got, want)
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_model_device_and_checkpoints_keep_their_structure(tmp_path):
    assert model_device(torch.nn.ReLU()) == torch.device("cpu")  # no parameters
    assert model_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    sd = torch.nn.BatchNorm1d(3).state_dict()  # an OrderedDict with _metadata (module versions)
    Pair = namedtuple("Pair", "a b")
    save_checkpoint(tmp_path / "c.pt", {"model": sd, "rng": (1, [2.0, torch.ones(2)]), "size": torch.Size([2, 3])})
    ck = torch.load(tmp_path / "c.pt", weights_only=True)
    assert type(ck["model"]).__name__ == "OrderedDict" and ck["model"]._metadata == sd._metadata
    assert ck["rng"][0] == 1 and torch.equal(ck["rng"][1][1], torch.ones(2)) and ck["size"] == torch.Size([2, 3])
    assert isinstance(ck["rng"], tuple) and isinstance(ck["rng"][1], list)
    assert set(load_checkpoint(tmp_path / "c.pt")["model"]) == set(sd)
    p = on_cpu(Pair(torch.zeros(1), 2))  # namedtuples keep their type and fields
    assert type(p) is Pair and p.b == 2 and torch.equal(p.a, torch.zeros(1))
