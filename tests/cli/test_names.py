"""`graphattn train NAME`: names are checked before torch loads, a misspelt one gets the closest names,
and the command line's light copy of the names equals the registries."""
import subprocess
import sys

import pytest

from graphattn.cli import names, social_train
from graphattn.cli.main import main
from graphattn.data.moleculenet import moleculenet_names
from graphattn.data.social import SOCIAL_NODE_ALIASES
from graphattn.data.tu import SOCIAL_GRAPH_ALIASES


def test_the_light_name_lists_equal_the_registries():
    assert names.MOLECULE_NAMES == tuple(moleculenet_names())
    assert names.SOCIAL_NAMES == tuple(sorted(social_train.DATASETS))
    assert names.SOCIAL_ALIASES == tuple(sorted({*SOCIAL_NODE_ALIASES, *SOCIAL_GRAPH_ALIASES}))


@pytest.mark.parametrize("name", ["Twitch_DE", "LastFM-Asia", "LastFM Asia", "twitch de", "IMDB_BINARY", "karate_club", "TOX21", "deezer_ego_nets"])
def test_every_accepted_spelling_passes_the_early_check(name):
    names.check_dataset_name(name)
    assert social_train.dataset_key(name) is not None or name.lower() in moleculenet_names()


@pytest.mark.parametrize("typo, meant", [("corra", "cora"), ("tox-21", "tox21"), ("twitch-dee", "twitch-de"),
                                         ("lipophilicty", "lipophilicity"), ("imdb-bin", "imdb-binary")])
def test_a_misspelt_name_suggests_the_close_ones(typo, meant, capsys):
    assert main(["train", typo]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"unknown dataset {typo!r} (did you mean {meant}" in err


def test_a_bad_name_or_a_missing_file_is_answered_before_torch_loads(tmp_path):
    code = ("import sys; from graphattn.cli.main import main; "
            f"a = main(['train', 'corra']); b = main(['train', '--csv', {str(tmp_path / 'no.csv')!r}]); "
            "c = main(['predict', '--checkpoint', 'nope.pt', '--smiles', 'CCO']); "
            "assert (a, b, c) == (2, 2, 2), (a, b, c); assert 'torch' not in sys.modules, 'torch was imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "did you mean cora?" in proc.stderr and "no.csv: no such file" in proc.stderr
    assert "--checkpoint nope.pt: no such file" in proc.stderr
