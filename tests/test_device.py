"""--device: auto / cpu / cuda[:N] for every train command (molecules, pretraining, social node
and graph sets); a GPU that is not there is a clear error, never a silent CPU run. The CUDA
tests run where a GPU is (they ran on an H200 in session 11) and skip elsewhere."""
import pytest
import torch

from graphattn.cli import main
from graphattn.train import resolve_device

from test_social_tasks import _tu_text

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
def test_cli_refuses_a_gpu_that_is_not_there(argv, tmp_path, capsys, no_gpu):
    files = {"TOY": _tu_text(tmp_path / "TOY.txt"), "MOL": tmp_path / "m.csv"}
    (tmp_path / "m.csv").write_text("smiles,a\nCCO,1\nCCN,0\nCCC,1\nc1ccccc1,0\n")
    argv = [str(files.get(a, a)) for a in argv] + ["--out", str(tmp_path / "out"), "--device", "cuda"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--device cuda: no CUDA GPU is available" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "best.pt").exists()


def test_explicit_cpu_trains_node_mini_batch_and_graph_sets(tmp_path):
    # batches are moved to the model's device: on the CPU that is a copy-free .to(), but it
    # must keep the mini-batch partition key hashable (Data.to turns a tuple into a list)
    assert main(["train", "karate", "--device", "cpu", "--mini-batch", "--epochs", "2", "--no-progress",
                 "--out", str(tmp_path / "k")]) == 0
    txt = _tu_text(tmp_path / "TOY.txt")
    assert main(["train", "--tu-text", str(txt), "--device", "cpu", "--epochs", "2", "--batch-size", "8",
                 "--no-progress", "--out", str(tmp_path / "g")]) == 0


@cuda
def test_cuda_runs_every_social_path_and_checkpoints_load_on_cpu(tmp_path, capsys):
    from graphattn.checkpoint import load_checkpoint

    for extra, out in ((["karate"], "k"), (["karate", "--mini-batch"], "m"),
                       (["--tu-text", str(_tu_text(tmp_path / "TOY.txt")), "--batch-size", "8"], "g")):
        assert main(["train", *extra, "--device", "cuda", "--epochs", "3", "--no-progress",
                     "--out", str(tmp_path / out)]) == 0
        ck = load_checkpoint(tmp_path / out / "best.pt")
        assert all(t.device.type == "cpu" for t in ck["model"].values())
        assert main(["evaluate", "--checkpoint", str(tmp_path / out / "best.pt")]) == 0
    assert "test acc" in capsys.readouterr().out
