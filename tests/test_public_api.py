"""Every public name imports and is documented in the API reference; the CLI's help works."""
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"
PUBLIC = ["graphattn", "graphattn.data", "graphattn.train"]
COMMANDS = ["train", "evaluate", "predict", "explain", "pretrain", "bench"]


def documented():
    """Full names of every ``.. autoclass::`` / ``.. autofunction::`` / ... directive of docs/api."""
    text = "\n".join(p.read_text() for p in API.glob("*.md"))
    return set(re.findall(r"^\.\. auto\w+::\s+([\w.]+)", text, flags=re.M))


def public_names(module):
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    assert names, f"{module} has no __all__"
    return mod, names


@pytest.mark.parametrize("module", PUBLIC)
def test_public_names_import(module):
    mod, names = public_names(module)
    assert len(set(names)) == len(names), f"{module}.__all__ lists a name twice"
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module}.__all__ names what it does not define: {missing}"
    for name in names:
        exec(f"from {module} import {name}", {})


@pytest.mark.parametrize("module", PUBLIC)
def test_public_names_are_documented(module):
    _, names = public_names(module)
    undocumented = [n for n in names if f"{module}.{n}" not in documented()]
    assert not undocumented, f"add these to docs/api/: {[f'{module}.{n}' for n in undocumented]}"


def test_nn_names_are_documented_once_it_has_an_all():
    nn = importlib.import_module("graphattn.nn")
    if not hasattr(nn, "__all__"):
        pytest.skip("graphattn.nn has no __all__ yet")
    top = set(importlib.import_module("graphattn").__all__)
    docs = documented()
    undocumented = [n for n in nn.__all__ if f"graphattn.nn.{n}" not in docs and
                    not (n in top and f"graphattn.{n}" in docs)]
    assert not undocumented, f"add these to docs/api/: {undocumented}"


def test_cli_help_exits_zero():
    # all at once: each process spends most of its time importing torch
    runs = {cmd: subprocess.Popen([sys.executable, "-m", "graphattn", *cmd.split(), "--help"], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for cmd in ["", *COMMANDS]}
    results = {cmd: (p.wait(timeout=300), *p.communicate()) for cmd, p in runs.items()}
    for cmd, (rc, out, err) in results.items():
        assert rc == 0, f"graphattn {cmd} --help exited {rc}: {err[-2000:]}"
        assert "usage:" in out, f"graphattn {cmd} --help printed no usage"
    top = results[""][1]
    assert all(cmd in top for cmd in COMMANDS), f"graphattn --help does not list every command:\n{top}"
