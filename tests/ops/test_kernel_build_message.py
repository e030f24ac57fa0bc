"""The first use of the C++ kernel compiles it (seconds to a minute or two): it says so, once, on stderr,
and the training loop builds it before the first epoch, so epoch 1's time and the progress bar's
estimate do not include the build."""
import torch

from graphattn import GraphSelfAttention
from graphattn.ops import extension
from graphattn.train import loop


def test_a_build_is_announced_and_a_cached_load_is_not(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRAPHATTN_BUILD_DIR", str(tmp_path))
    monkeypatch.setenv("GRAPHATTN_NO_NINJA", "1")  # the direct-compiler route: its library file is known
    lib = extension.build_directory() / "graphattn_edge_attention_direct.so"
    built = []

    def compile_(build_dir, verbose):  # stands in for the compiler: creates the library file
        built.append(build_dir)
        lib.write_bytes(b"")
        return str(lib)

    monkeypatch.setattr(extension, "_build_without_ninja", compile_)
    monkeypatch.setattr(torch.ops, "load_library", lambda path: None)
    extension._load()
    err = capsys.readouterr().err
    assert "building the CPU attention kernel" in err and "GRAPHATTN_NO_CPP=1" in err and built
    extension._load()  # the library is there now: loaded from the cache, nothing said
    assert capsys.readouterr().err == ""


def test_fit_builds_the_kernel_before_the_first_epoch(monkeypatch):
    order = []
    monkeypatch.setattr(extension, "fused_available", lambda: order.append("build") or False)
    real_bar = loop.progress_bar
    monkeypatch.setattr(loop, "progress_bar", lambda *a, **k: order.append("bar") or real_bar(*a, **k))
    layer = GraphSelfAttention(4, 4, heads=1)
    x, ei, y = torch.randn(3, 4), torch.tensor([[0, 1, 2], [1, 2, 0]]), torch.tensor([0, 1, 0])
    head = torch.nn.Linear(4, 2)
    model = torch.nn.ModuleDict({"attn": layer, "head": head})

    def forward(m, batch, split):
        return m["head"](m["attn"](x, ei)), y

    loop.fit(model, {"train": [0], "val": [0], "test": [0]}, forward,
             loop.TrainConfig(kind="multiclass", epochs=1, progress=False), log=lambda s: None)
    assert order[:2] == ["build", "bar"]
    order.clear()
    loop.fit(head, {"train": [0], "val": [0], "test": [0]}, lambda m, b, s: (m(x), y),
             loop.TrainConfig(kind="multiclass", epochs=1, progress=False), log=lambda s: None)
    assert "build" not in order  # no attention layer: nothing to build
