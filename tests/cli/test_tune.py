"""`graphattn tune` end to end on a tiny CSV, and `graphattn train --config` reading what it writes."""
import json
import pathlib

import pytest

pytest.importorskip("optuna")

from graphattn.cli.main import main  # noqa: E402
from graphattn.tasks.molecules.tune import SEARCH_SPACE  # noqa: E402

FIX = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
CSV = str(FIX / "molecules_tasks_train.csv")
TINY = ["--csv", CSV, "--epochs", "2", "--threads", "1", "--no-progress"]


def test_tune_writes_the_best_configuration_that_train_reads(tmp_path, capsys):
    out = tmp_path / "tune"
    assert main(["tune", *TINY, "--hidden", "16", "--trials", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "hidden" not in printed.split("searched option(s):")[1].split(";")[0]  # given: fixed, not searched
    assert printed.count("\ntrial ") + printed.startswith("trial ") == 3 and "best: trial" in printed
    config = json.loads((out / "best_config.json").read_text())
    assert config["hidden"] == 16 and config["epochs"] == 2 and pathlib.Path(config["csv"]).is_absolute()
    assert set(SEARCH_SPACE["none"]) <= set(config)
    assert "threads" not in config and "out" not in config and "trials" not in config
    assert len((out / "trials.csv").read_text().splitlines()) == 4  # header + 3 trials
    # the same command continues the stored study: one more trial for --trials 4
    assert main(["tune", *TINY, "--hidden", "16", "--trials", "4", "--out", str(out)]) == 0
    assert capsys.readouterr().out.count("trial 3:") == 1
    assert main(["tune", *TINY, "--hidden", "32", "--trials", "4", "--out", str(out)]) == 2
    assert "other settings (hidden)" in capsys.readouterr().err
    # the same command on a CSV that changed since is refused: its trials scored other molecules
    edited = tmp_path / "edited.csv"
    edited.write_text(pathlib.Path(CSV).read_text())
    edits = ["tune", "--csv", str(edited), *TINY[2:], "--hidden", "16", "--trials", "1", "--out", str(tmp_path / "e")]
    assert main(edits) == 0
    rows = edited.read_text().splitlines()
    edited.write_text("\n".join(rows[:-1]) + "\n")
    assert main(edits[:-4] + ["--trials", "2", "--out", str(tmp_path / "e")]) == 2
    assert "other settings (csv_sha256)" in capsys.readouterr().err
    # train --config: the file's values, with a flag of the command line over them
    run = tmp_path / "run"
    assert main(["train", "--config", str(out / "best_config.json"), "--layers", "2", "--out", str(run),
                 "--no-progress", "--threads", "1"]) == 0
    hp = json.loads((run / "metrics.json").read_text())["meta"]["hparams"]
    assert hp["layers"] == 2 and hp["hidden"] == 16 and hp["lr"] == pytest.approx(config["lr"])
    assert hp["pe_kind"] == config["pe_kind"] and hp["descriptors"] == config["descriptors"]
    # --seed on the command line replaces a seed the file holds (no "--seed and --seeds" clash)
    seeded = tmp_path / "seeded.json"
    seeded.write_text(json.dumps({**config, "seed": 7}))
    assert main(["train", "--config", str(seeded), "--seeds", "0", "1", "--out", str(tmp_path / "s"),
                 "--no-progress", "--threads", "1"]) == 0
    assert (tmp_path / "s" / "seed_1" / "metrics.json").is_file()


@pytest.mark.parametrize("content, message", [
    ('{"lrr": 0.1}', "'lrr' is not a graphattn train option that a config may set (did you mean lr?)"),
    ('{"pe_kind": "eigen"}', "pe_kind: 'eigen' is not one of"),
    ('{"out": "elsewhere"}', "'out' is not a graphattn train option"),
    ('{"lr": "fast"}', "lr: invalid value 'fast'"),
    ('{"pos_weight": "false"}', "pos_weight: expected true or false"),
    ('{"seeds": 3}', "seeds: expected a list"),
    ('{"epochs": 2.5}', "epochs: expected an integer"),
    ('{"hidden": true}', "hidden: expected an integer"),
    ('{"descriptors": "rdkit3d"}', "descriptors: 'rdkit3d' is not one of"),
    ('[1, 2]', "expected a JSON object"),
    ('{"lr": 0.1', "not JSON"),
])
def test_a_bad_config_file_is_one_line_naming_the_key(tmp_path, capsys, content, message):
    path = tmp_path / "c.json"
    path.write_text(content)
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_tune_refuses_what_a_search_cannot_use(tmp_path, capsys):
    for extra, message in ((["--seeds", "0", "1"], "--seeds: not for a search"), (["--trials", "0"], "--trials must be"),
                           (["--baseline", "gcn"], "--baseline must be one of"), (["--top", "0"], "--top must be"),
                           (["--overwrite"], "--overwrite: not for a search")):
        assert main(["tune", *TINY, *extra, "--out", str(tmp_path / "t")]) == 2
        assert message in capsys.readouterr().err
    assert main(["tune", "karate", "--out", str(tmp_path / "k")]) == 2
    assert "'karate' is not a molecule set" in capsys.readouterr().err
    assert main(["train", "--config", str(tmp_path / "missing.json")]) == 2
    assert "--config" in (err := capsys.readouterr().err) and "no such file" in err
