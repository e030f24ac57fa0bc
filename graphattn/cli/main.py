"""Command line: ``graphattn train | evaluate | predict | explain | pretrain | bench``.

Molecule tasks live in :mod:`graphattn.cli.molecules_train`, social-network tasks in
:mod:`graphattn.cli.social_train`; each adds its own options and this file routes a command to
the right one (by dataset name, by input-file option, or by the checkpoint's ``pipeline``).
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import os
import runpy
import sys
import warnings
from pathlib import Path
from typing import List, Optional

import torch

from graphattn.cli import molecules_train as molecule_tasks
from graphattn.cli import pretrain as pretrain_commands
from graphattn.cli import social_train as social_tasks
from graphattn.cli.options import (DATA_ROOT_HELP, DEVICE_HELP, check_paths, check_train_numbers, given_options,
                                   usage_error)
from graphattn.data.molecules import TOXICITY_DATASETS
from graphattn.train import distributed
from graphattn.train.distributed import DistributedSetupError
from graphattn.train.loop import CheckpointError, load_checkpoint, resolve_device
from graphattn.utils.files import check_out_folder

__all__ = ["main", "build_parser"]


def _common_train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", nargs="?", default=None,
                   help="named dataset (e.g. karate, cora, facebook, twitch-de, imdb-binary, tox21); "
                        "omit when giving --csv / --edges / --tu-text")
    g = p.add_argument_group("training")
    g.add_argument("--epochs", type=int, default=None, help="training epochs (default: per dataset)")
    g.add_argument("--lr", type=float, default=None, help="learning rate (default: per dataset)")
    g.add_argument("--weight-decay", type=float, default=None, help="L2 weight decay (default: per dataset)")
    g.add_argument("--batch-size", type=int, default=64, help="graphs per batch (graph-level tasks)")
    g.add_argument("--patience", type=int, default=None, help="early-stopping patience in epochs")
    g.add_argument("--seed", type=int, default=0, help="seed of initialisation, batch order and random splits "
                                                      "(default 0)")
    g.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default: torch's; small molecules and graphs are often "
                        "fastest with 1 on a busy machine)")
    g.add_argument("--out", default=None, help="output folder (metrics.json, best.pt, last.pt)")
    g.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    g.add_argument("--overwrite", action="store_true", help="replace the run already in --out (without it, "
                                                            "a folder holding a run is refused)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g.add_argument("--distributed", action="store_true",
                   help="data-parallel training across the processes started by torchrun "
                        "(gloo on CPU, NCCL on GPU); only rank 0 writes files")
    g.add_argument("--limit", type=int, default=None,
                   help="smoke runs: only the first N valid molecules; for graph sets a seeded random N graphs "
                        "(the files are sorted by label)")
    g.add_argument("--device", default="auto", help=DEVICE_HELP)
    g.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
    m = p.add_argument_group("model")
    m.add_argument("--hidden", type=int, default=None, help="hidden channels (default: per dataset)")
    m.add_argument("--layers", type=int, default=None, help="transformer blocks (default: per dataset)")
    m.add_argument("--heads", type=int, default=None, help="attention heads (default 4)")  # None: given or not
    m.add_argument("--dropout", type=float, default=None, help="dropout (default: per dataset)")
    m.add_argument("--global-tokens", type=int, default=None, help="global tokens per graph")
    m.add_argument("--pe-dim", type=int, default=None, help="Laplacian PE size (0 = none)")
    m.add_argument("--readout", default=None, choices=["mean", "sum", "max", "token"],
                   help="graph-level tasks: pooling of the node states (token = the global tokens' state; "
                        "default: per dataset)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphattn", description="Graph self-attention toolkit")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a model and write OUT/metrics.json and OUT/best.pt")
    _common_train_args(train)
    molecule_tasks.add_train_arguments(train)
    social_tasks.add_train_arguments(train)
    for name, helptext in (("evaluate", "evaluate a checkpoint on its test split or on --csv"),
                           ("predict", "per-task probabilities / class predictions"),
                           ("explain", "draw what the model attends to (molecule or ego-graph)")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--checkpoint", required=True, help="path to best.pt")
        p.add_argument("--csv", default=None, help="molecules: CSV with a SMILES column (labelled for evaluate)")
        p.add_argument("--smiles-col", default="smiles", help="molecules: SMILES column of --csv")
        p.add_argument("--no-progress", action="store_true", help="no progress bars")
        p.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
        if name != "evaluate":
            p.add_argument("--smiles", nargs="+", default=None, help="molecules: SMILES strings")
            p.add_argument("--out", default=None, help="output file (predictions CSV or picture PNG), or an "
                                                       "existing folder to write the default file name into")
        for flag, what in (("--edges", "edges CSV"), ("--target", "target CSV"), ("--features", "features JSON"),
                           ("--tu-text", "--tu-text file or folder")):
            p.add_argument(flag, default=None, help=f"social: where the run's {what} is now (the files moved); "
                                                     "the recorded sha256 still checks the contents")
        if name == "explain":
            p.add_argument("--node", type=int, default=None, help="social: node id whose ego-graph to draw")
            p.add_argument("--hops", type=int, default=1, help="social: ego-graph radius")
            p.add_argument("--task", default=None, help="molecules: also draw this task's attribution "
                                                        "(attention × gradient) beside the rollout")
            p.add_argument("--top-k", type=int, default=None, help="the k most attended atoms named in the "
                                                                   "text (molecules, default 3) or nodes "
                                                                   "labelled (social, default 10)")

    pretrain_commands.add_parser(sub)
    bench = sub.add_parser("bench", help="run a benchmark script from benchmarks/")
    bench.add_argument("name", nargs="?", default="attention",
                       help="script of benchmarks/ (default attention; e.g. large_graph, tox21_epoch, variants)")
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def _pipeline_of(checkpoint: str) -> str:
    meta = load_checkpoint(checkpoint).get("meta")
    if not isinstance(meta, dict) or "pipeline" not in meta:
        raise CheckpointError(f"{checkpoint} is not a graphattn training checkpoint (no 'meta.pipeline')")
    return meta["pipeline"]


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"graphattn: {category.__name__}: {message}\n"  # no echo of the source line that warned


def _stdout_is_broken() -> bool:
    """True when our standard output is a pipe whose reader has gone (POLLERR on fd 1)."""
    try:
        import select

        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no real fd (captured, notebooks)
        return False


@contextlib.contextmanager
def _quiet_unless_main():
    """stdout to /dev/null on the ranks other than 0 of a torchrun job (a no-op otherwise)."""
    if distributed.is_main():
        yield
        return
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        yield


def main(argv: Optional[List[str]] = None) -> int:
    """``graphattn ...``; returns the exit status (0 ok, 2 bad input, 1 output pipe closed)."""
    try:
        rc = _main(argv)
        try:
            sys.stdout.flush()  # inside the try: buffered output would otherwise fail at exit
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                raise
            # `graphattn predict ... > file` on a full disk: say so instead of a traceback at exit
            print(f"graphattn: cannot write the output to stdout: {exc.strerror or exc}", file=sys.stderr)
            _stdout_to_devnull()
            return 1
        return rc
    except BrokenPipeError:
        # `graphattn evaluate ... | head -1`: the reader of our output left; end quietly, as
        # Python's docs recommend. A broken pipe elsewhere (stderr, a socket) is a real error.
        if not _stdout_is_broken():
            raise
        _stdout_to_devnull()
        return 1
    except KeyboardInterrupt:
        print("\ngraphattn: interrupted" + (" (continue with the same command and --resume: every finished "
                                            "epoch is saved)" if argv_command(argv) in ("train", "pretrain") else ""),
              file=sys.stderr)
        return 130
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        # a full disk (also behind stdout, e.g. `> /dev/full`) is not a bug: one line, no traceback
        print(f"graphattn: no space left on the device{' for ' + str(exc.filename) if exc.filename else ''}",
              file=sys.stderr)
        _stdout_to_devnull()
        return 1


def argv_command(argv: Optional[List[str]]) -> Optional[str]:
    """The subcommand of a command line (``train``, ``predict``, ...), if any."""
    args = sys.argv[1:] if argv is None else argv
    return next((a for a in args if not a.startswith("-")), None)


def _stdout_to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # so Python's own flush at exit writes nowhere
    os.close(devnull)


def _main(argv: Optional[List[str]] = None) -> int:
    """Parse, check the paths, run the command (each command: validate -> build -> run)."""
    args = build_parser().parse_args(argv)
    try:
        check_paths(args)
    except ValueError as exc:
        return usage_error(args.command, str(exc))
    warnings.formatwarning = _one_line_warning
    if getattr(args, "data_root", None):  # the one place a command line sets the data root
        os.environ["GRAPHATTN_DATA"] = str(Path(args.data_root).expanduser().resolve())
    return COMMANDS[args.command](args)


def _check_train(args):
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


def _start_distributed(device) -> Optional[int]:
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


def _train(args) -> int:
    """``graphattn train``: the molecule or the social pipeline, chosen by dataset name or input option."""
    try:
        device = _check_train(args)
    except ValueError as exc:
        return usage_error("train", str(exc))
    if args.distributed:
        failed = _start_distributed(device)
        if failed is not None:
            return failed
    try:
        # under torchrun only rank 0 reports (it alone writes the files); errors stay on stderr
        with _quiet_unless_main():
            if molecule_tasks.handles(args):
                return molecule_tasks.train(args)
            if social_tasks.handles(args):
                return social_tasks.train(args)
    # --resume into another model's folder; divergence; ranks that cannot share the batches
    except (CheckpointError, FloatingPointError, DistributedSetupError) as exc:
        return usage_error("train", str(exc))
    known = sorted(TOXICITY_DATASETS) + sorted(social_tasks.DATASETS)
    what = "no dataset given" if args.dataset is None else f"unknown dataset {args.dataset!r}"
    return usage_error("train", f"{what}; choose one of {', '.join(known)} "
                                "or give --csv FILE, --edges E --target T, or --tu-text FILE")


def _bench(args) -> int:
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


def _checkpoint_command(args) -> int:
    """``evaluate`` / ``predict`` / ``explain``: the pipeline that wrote the checkpoint runs it."""
    try:
        pipeline = _pipeline_of(args.checkpoint)
    except CheckpointError as exc:
        return usage_error(args.command, str(exc))
    if pipeline == "pretrain":
        return usage_error(args.command, f"{args.checkpoint} is a pretraining checkpoint (no task head); "
                                         f"fine-tune it first: graphattn train tox21 --init {args.checkpoint}")
    moved = [f"--{k.replace('_', '-')}" for k in ("edges", "target", "features", "tu_text") if getattr(args, k, None)]
    if pipeline == "molecules" and moved:
        return usage_error(args.command, f"{', '.join(moved)}: for social-network checkpoints (where their input "
                                         "files are now); a molecule checkpoint reads --csv / --smiles")
    module = molecule_tasks if pipeline == "molecules" else social_tasks
    return getattr(module, args.command)(args)


#: what runs each command (after parsing and the path check)
COMMANDS = {"train": _train, "pretrain": pretrain_commands.pretrain, "bench": _bench,
            "evaluate": _checkpoint_command, "predict": _checkpoint_command, "explain": _checkpoint_command}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
