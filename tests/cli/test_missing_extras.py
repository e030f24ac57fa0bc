"""A missing optional dependency is one line naming the extra to install, not a traceback."""
import sys


from graphattn.cli.main import OPTIONAL_MODULES, main, missing_extra_line

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def block(monkeypatch, *names):
    """Make ``import name`` fail as when the package is not installed."""
    for name in list(sys.modules):
        if name.split(".")[0] in names:
            monkeypatch.delitem(sys.modules, name)
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)  # import -> ModuleNotFoundError(name=name)


def test_train_on_molecules_without_rdkit(monkeypatch, capsys, tmp_path):
    block(monkeypatch, "rdkit")
    rc = main(["train", "--csv", str(ROOT / "tests/fixtures/molecules_tasks_train.csv"), "--epochs", "1",
               "--no-progress", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "graphattn train: this needs rdkit" in err and "pip install 'graphattn[molecules]'" in err


def test_explain_without_matplotlib(monkeypatch, capsys, tmp_path):
    block(monkeypatch, "matplotlib")
    rc = main(["explain", "--checkpoint", str(ROOT / "tests/fixtures/checkpoints/karate_v0.pt"), "--node", "0",
               "--out", str(tmp_path / "node0.png")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert "this needs matplotlib" in err and "pip install 'graphattn[viz]'" in err
    assert not (tmp_path / "node0.png").exists()


def test_other_missing_modules_are_not_disguised():
    assert missing_extra_line("train", ModuleNotFoundError("x", name="no_such_module")) is None
    for module, (_, extra) in OPTIONAL_MODULES.items():
        line = missing_extra_line(None, ModuleNotFoundError("x", name=f"{module}.sub"))
        assert line.startswith(f"graphattn: this needs {module}") and f"graphattn[{extra}]" in line


def test_every_named_extra_exists():
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {extra for _, extra in OPTIONAL_MODULES.values()} <= set(extras)
