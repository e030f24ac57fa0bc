"""``graphattn --help`` and a command's ``--help`` parse and answer before anything imports torch (which
takes seconds): the options live in graphattn.cli.arguments, the runs in graphattn.cli.commands."""
import subprocess
import sys

import pytest

COMMANDS = ["", "train", "evaluate", "predict", "explain", "pretrain", "bench"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_does_not_import_torch(command):
    code = ("import sys\nfrom graphattn.cli.main import main\n"
            f"try:\n    main({[c for c in [command] if c] + ['--help']!r})\nexcept SystemExit as exc:\n"
            "    assert exc.code == 0, exc.code\n"
            "print('TORCH', 'torch' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "usage: graphattn" in res.stdout and "TORCH False" in res.stdout, res.stdout[-300:] + res.stderr


def test_a_bad_option_is_refused_before_torch_too():
    code = ("import sys\nfrom graphattn.cli.main import main\n"
            "try:\n    main(['train', '--epochs', 'many'])\nexcept SystemExit as exc:\n    print('EXIT', exc.code)\n"
            "print('TORCH', 'torch' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "EXIT 2" in res.stdout and "TORCH False" in res.stdout and "invalid int value" in res.stderr


def test_the_public_names_still_load_on_use():
    import graphattn

    assert graphattn.GraphSelfAttention.__module__ == "graphattn.nn.attention.layer"
    assert "GraphSelfAttention" in dir(graphattn) and set(graphattn.__all__) <= set(dir(graphattn))
    with pytest.raises(AttributeError, match="no attribute 'NoSuchLayer'"):
        graphattn.NoSuchLayer  # noqa: B018
