"""What each ``graphattn`` command runs once its options are parsed (:data:`COMMANDS`): ``train`` and
``pretrain`` validate, build and train; ``evaluate``, ``predict`` and ``explain`` hand a checkpoint to
the pipeline that wrote it; ``export`` writes a molecule checkpoint's ``torch.export`` program; ``bench`` runs a script of ``benchmarks/``."""
from __future__ import annotations

import contextlib
import os
import runpy
import sys
from pathlib import Path
from typing import Optional

import torch

from graphattn.cli import (export, molecules_explain, molecules_predict, molecules_train, pretrain, social_predict, social_train,
                           tune)
from graphattn.cli.arguments import build_parser
from graphattn.cli.names import close_names
from graphattn.cli.options import check_train_numbers, given_options, message_of, usage_error
from graphattn.cli.seeds import run_seeds
from graphattn.data.fetch import fetch_dataset
from graphattn.data.moleculenet import MOLECULENET, moleculenet_names
from graphattn.train import distributed
from graphattn.train.checkpoint import CheckpointError, load_checkpoint
from graphattn.train.distributed import DistributedSetupError
from graphattn.train.runtime import resolve_device
from graphattn.utils.files import check_out_folder

__all__ = ["COMMANDS", "TRAIN_PIPELINES", "CHECKPOINT_COMMANDS", "train_pipeline", "quiet_unless_main", "pipeline_of"]

#: what ``graphattn train`` runs for each kind of input, and (per pipeline) what a checkpoint command runs
TRAIN_PIPELINES = {"molecules": molecules_train.train, "social": social_train.train}
CHECKPOINT_COMMANDS = {
    "molecules": {"evaluate": molecules_predict.evaluate, "predict": molecules_predict.predict,
                  "explain": molecules_explain.explain},
    "social": {"evaluate": social_predict.evaluate, "predict": social_predict.predict,
               "explain": social_predict.explain},
}


def train_pipeline(args) -> Optional[str]:
    """The pipeline of a ``train`` command line, from its input: ``"molecules"`` (a MoleculeNet name or
    ``--csv``), ``"social"`` (a social dataset name, ``--edges`` / ``--target`` or ``--tu-text``), or None."""
    name = getattr(args, "dataset", None)
    if getattr(args, "csv", None) is not None or (name is not None and name.lower() in MOLECULENET):
        return "molecules"
    if getattr(args, "edges", None) or getattr(args, "tu_text", None) or getattr(args, "target", None) \
            or social_train.dataset_key(name) in social_train.DATASETS:
        return "social"
    return None


def pipeline_of(checkpoint: str) -> str:
    """The ``meta["pipeline"]`` of a training checkpoint (``molecules``, ``node``, ``graph``, ``pretrain``)."""
    meta = load_checkpoint(checkpoint).get("meta")
    if not isinstance(meta, dict) or "pipeline" not in meta:
        raise CheckpointError(f"{checkpoint} is not a graphattn training checkpoint (no 'meta.pipeline')")
    return meta["pipeline"]


@contextlib.contextmanager
def quiet_unless_main():
    """stdout to /dev/null on the ranks other than 0 of a torchrun job (a no-op otherwise)."""
    if distributed.is_main():
        yield
        return
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        yield


def check_train(args):
    """Validate ``train``'s options and set up its device and threads: the device, or ValueError."""
    args.given_options = given_options(args, build_parser().parse_args(["train"]))
    check_train_numbers(args)
    check_out_folder(args.out)
    device = resolve_device(args.device)
    if args.distributed and device.type == "cuda" and device.index is not None:
        raise ValueError(f"--device {args.device} with --distributed: each torchrun process uses the "
                         "GPU of its LOCAL_RANK; give --device cuda (or auto)")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    return device


def start_distributed(device) -> Optional[int]:
    """Join the torchrun job (None), or the exit status of a job that cannot start."""
    if "WORLD_SIZE" not in os.environ:
        print("graphattn train --distributed must be launched by torchrun, e.g. "
              "torchrun --nproc_per_node 2 -m graphattn train ... --distributed", file=sys.stderr)
        return 2
    try:
        distributed.init_from_env(device=device)
    except DistributedSetupError as exc:
        return usage_error("train", str(exc))
    return None


def run_train(args) -> int:
    """``graphattn train``: the molecule or the social pipeline, chosen by dataset name or input option."""
    try:
        device = check_train(args)
    except ValueError as exc:
        return usage_error("train", str(exc))
    if args.distributed:
        failed = start_distributed(device)
        if failed is not None:
            return failed
    try:
        # under torchrun only rank 0 reports (it alone writes the files); errors stay on stderr
        with quiet_unless_main():
            pipeline = train_pipeline(args)
            if pipeline is not None and getattr(args, "seeds", None):
                return run_seeds(args, TRAIN_PIPELINES[pipeline])
            if pipeline is not None:
                return TRAIN_PIPELINES[pipeline](args)
    # --resume into another model's folder; divergence; ranks that cannot share the batches
    except (CheckpointError, FloatingPointError, DistributedSetupError) as exc:
        return usage_error("train", str(exc))
    known = moleculenet_names() + sorted(social_train.DATASETS)
    close = close_names(args.dataset) if args.dataset is not None else []
    what = "no dataset given" if args.dataset is None else f"unknown dataset {args.dataset!r}" + (
        f" (did you mean {' or '.join(close)}?)" if close else "")
    return usage_error("train", f"{what}; choose one of {', '.join(known)} "
                                "or give --csv FILE, --edges E --target T, or --tu-text FILE")


def run_bench(args) -> int:
    """``graphattn bench NAME ...``: run ``benchmarks/NAME.py`` of the source checkout."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / f"{args.name}.py"
    if not script.exists():
        known = sorted(f.stem for f in script.parent.glob("[!_]*.py")) if script.parent.is_dir() else []
        return usage_error("bench", f"no benchmark {args.name!r} in {script.parent}"
                           + (f"; choose one of {', '.join(known)}" if known else
                              " (the benchmarks ship with the source checkout, not with the wheel)"))
    sys.argv = [str(script), *args.rest]
    runpy.run_path(str(script), run_name="__main__")
    return 0


def run_checkpoint_command(args) -> int:
    """``evaluate`` / ``predict`` / ``explain``: the pipeline that wrote the checkpoint runs it."""
    try:
        pipeline = pipeline_of(args.checkpoint)
    except CheckpointError as exc:
        return usage_error(args.command, str(exc))
    if pipeline == "pretrain":
        return usage_error(args.command, f"{args.checkpoint} is a pretraining checkpoint (no task head); "
                                         f"fine-tune it first: graphattn train tox21 --init {args.checkpoint}")
    moved = [f"--{k.replace('_', '-')}" for k in ("edges", "target", "features", "tu_text") if getattr(args, k, None)]
    if pipeline == "molecules" and moved:
        return usage_error(args.command, f"{', '.join(moved)}: for social-network checkpoints (where their input "
                                         "files are now); a molecule checkpoint reads --csv / --smiles")
    return CHECKPOINT_COMMANDS["molecules" if pipeline == "molecules" else "social"][args.command](args)


def run_download(args) -> int:
    """``graphattn download NAME ... [--root DIR]``: each named dataset's files, downloaded and checked;
    one line per name, exit 2 when any could not be fetched."""
    failed = 0
    for name in args.names:
        try:
            print(fetch_dataset(name, args.root), flush=True)
        except (KeyError, OSError, ValueError) as exc:  # DataFileError is a ValueError; offline is an OSError
            failed += 1
            print(f"graphattn download: {name}: {message_of(exc)}", file=sys.stderr)
    if not failed:
        root = Path(args.root).expanduser().resolve() if args.root else None
        print(f"Done: {len(args.names)} dataset(s)" + (f" in {root}; use it with --data-root {root} or "
                                                       f"GRAPHATTN_DATA={root}" if root else ""))
    return 2 if failed else 0


#: what runs each command (after parsing and the path check)
COMMANDS = {"train": run_train, "tune": tune.tune, "pretrain": pretrain.pretrain, "bench": run_bench,
            "download": run_download, "export": export.export,
            "evaluate": run_checkpoint_command, "predict": run_checkpoint_command, "explain": run_checkpoint_command}
