"""Command line: ``graphattn train | evaluate | predict | explain | pretrain | bench``.

Molecule tasks live in :mod:`graphattn.cli.molecules_train`, social-network tasks in
:mod:`graphattn.cli.social_train`; each adds its own options and this file routes a command to
the right one (by dataset name, by input-file option, or by the checkpoint's ``pipeline``).
"""
from __future__ import annotations

import argparse
import contextlib
import math
import errno
import os
import sys
from typing import List, Optional

from graphattn.cli.options import DEVICE_HELP

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
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g.add_argument("--distributed", action="store_true",
                   help="data-parallel training across the processes started by torchrun "
                        "(gloo on CPU, NCCL on GPU); only rank 0 writes files")
    g.add_argument("--limit", type=int, default=None,
                   help="smoke runs: only the first N valid molecules; for graph sets a seeded random N graphs "
                        "(the files are sorted by label)")
    g.add_argument("--device", default="auto", help=DEVICE_HELP)
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


_AT_LEAST = {"epochs": 1, "limit": 1, "batch_size": 1, "patience": 0, "hidden": 1, "layers": 0, "heads": 1,
             "folds": 2, "threads": 1, "global_tokens": 0, "pe_dim": 0, "ensemble": 1, "gcn_layers": 1, "propagation": 0,
             "consistency": 0, "consistency_weight": 0}
_FRACTIONS = ("dropout", "attn_dropout", "input_dropout", "propagation_dropout")


def check_train_numbers(args) -> None:
    """ValueError naming the option when a numeric ``train`` option is out of its range."""
    for name, low in _AT_LEAST.items():
        val = getattr(args, name, None)
        if val is not None and val < low:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {val}")
    for name in _FRACTIONS:
        val = getattr(args, name, None)
        if val is not None and not 0.0 <= val < 1.0:
            raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1), got {val}")
    for name in ("lr",):
        val = getattr(args, name, None)
        if val is not None and not (math.isfinite(val) and val > 0):
            raise ValueError(f"--lr must be a finite number > 0, got {val}")
    val = getattr(args, "consistency_weight", None)
    if val is not None and not math.isfinite(val):
        raise ValueError(f"--consistency-weight must be a finite number >= 0, got {val}")
    val = getattr(args, "consistency_temperature", None)
    if val is not None and not 0.0 < val <= 1.0:
        raise ValueError(f"--consistency-temperature must be in (0, 1], got {val}")
    val = getattr(args, "weight_decay", None)
    if val is not None and not (math.isfinite(val) and val >= 0):
        raise ValueError(f"--weight-decay must be a finite number >= 0, got {val}")
    val = getattr(args, "seed", None)
    if val is not None and not 0 <= val < 2 ** 32:  # NumPy's and scikit-learn's seed range, for every pipeline
        raise ValueError(f"--seed must be in 0..{2 ** 32 - 1}, got {val}")
    val, cpus = getattr(args, "threads", None), os.cpu_count() or 1
    if val is not None and val > max(256, 4 * cpus):
        raise ValueError(f"--threads {val}: far more than this machine's {cpus} CPUs")


#: options naming files or folders: an empty value is a mistake (it would mean the current folder)
_PATH_OPTIONS = ("out", "csv", "checkpoint", "init", "edges", "target", "features", "tu_text", "exclude")


def check_paths(args) -> None:
    """ValueError naming the option given an empty path (``--out ""``, ``--csv ""``)."""
    for name in _PATH_OPTIONS:
        val = getattr(args, name, None)
        for v in (val if isinstance(val, list) else [val]):
            if isinstance(v, str) and not v.strip():
                raise ValueError(f"--{name.replace('_', '-')}: empty path")


def build_parser() -> argparse.ArgumentParser:
    from graphattn.cli import molecules_train as molecule_tasks, social_train as social_tasks

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
    from graphattn.cli import pretrain as pretrain_commands

    pretrain_commands.add_parser(sub)
    bench = sub.add_parser("bench", help="run a benchmark script from benchmarks/")
    bench.add_argument("name", nargs="?", default="attention",
                       help="script of benchmarks/ (default attention; e.g. large_graph, tox21_epoch, variants)")
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def _pipeline_of(checkpoint: str) -> str:
    from graphattn.train.loop import load_checkpoint

    meta = load_checkpoint(checkpoint).get("meta")
    if not isinstance(meta, dict) or "pipeline" not in meta:
        from graphattn.train.loop import CheckpointError

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
    from graphattn.train import distributed

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
    args = build_parser().parse_args(argv)
    try:
        check_paths(args)
    except ValueError as exc:
        print(f"graphattn {args.command}: {exc}", file=sys.stderr)
        return 2
    import warnings

    warnings.formatwarning = _one_line_warning
    from graphattn.cli import molecules_train as molecule_tasks, social_train as social_tasks

    from graphattn.train.loop import CheckpointError, resolve_device

    if args.command == "train":
        from graphattn.cli.options import check_out_folder, given_options

        args.given_options = given_options(args, build_parser().parse_args(["train"]))
        try:
            check_train_numbers(args)
            check_out_folder(args.out)
            device = resolve_device(args.device)
            if args.distributed and device.type == "cuda" and device.index is not None:
                raise ValueError(f"--device {args.device} with --distributed: each torchrun process uses the "
                                 "GPU of its LOCAL_RANK; give --device cuda (or auto)")
            if args.threads is not None:
                import torch

                torch.set_num_threads(args.threads)
        except ValueError as exc:
            print(f"graphattn train: {exc}", file=sys.stderr)
            return 2
        if args.distributed:
            from graphattn.train import distributed

            if "WORLD_SIZE" not in os.environ:
                print("graphattn train --distributed must be launched by torchrun, e.g. "
                      "torchrun --nproc_per_node 2 -m graphattn train ... --distributed", file=sys.stderr)
                return 2
            try:
                distributed.init_from_env(device=device)
            except distributed.DistributedSetupError as exc:
                print(f"graphattn train: {exc}", file=sys.stderr)
                return 2
        from graphattn.train.distributed import DistributedSetupError

        try:
            # under torchrun only rank 0 reports (it alone writes the files); errors stay on stderr
            with _quiet_unless_main():
                if molecule_tasks.handles(args):
                    return molecule_tasks.train(args)
                if social_tasks.handles(args):
                    return social_tasks.train(args)
        # --resume into another model's folder; divergence; ranks that cannot share the batches
        except (CheckpointError, FloatingPointError, DistributedSetupError) as exc:
            print(f"graphattn train: {exc}", file=sys.stderr)
            return 2
        known = sorted(molecule_tasks.DATASETS) + sorted(social_tasks.DATASETS)
        what = "no dataset given" if args.dataset is None else f"unknown dataset {args.dataset!r}"
        print(f"graphattn train: {what}; choose one of {', '.join(known)} "
              "or give --csv FILE, --edges E --target T, or --tu-text FILE", file=sys.stderr)
        return 2
    if args.command == "pretrain":
        from graphattn.cli import pretrain as pretrain_commands

        return pretrain_commands.pretrain(args)
    if args.command == "bench":
        import runpy
        from pathlib import Path

        script = Path(__file__).resolve().parents[1] / "benchmarks" / f"{args.name}.py"
        if not script.exists():
            known = sorted(f.stem for f in script.parent.glob("[!_]*.py")) if script.parent.is_dir() else []
            print(f"graphattn bench: no benchmark {args.name!r} in {script.parent}"
                  + (f"; choose one of {', '.join(known)}" if known else
                     " (the benchmarks ship with the source checkout, not with the wheel)"), file=sys.stderr)
            return 2
        sys.argv = [str(script), *args.rest]
        runpy.run_path(str(script), run_name="__main__")
        return 0
    try:
        pipeline = _pipeline_of(args.checkpoint)
    except CheckpointError as exc:
        print(f"graphattn {args.command}: {exc}", file=sys.stderr)
        return 2
    if pipeline == "pretrain":
        print(f"graphattn {args.command}: {args.checkpoint} is a pretraining checkpoint (no task head); "
              f"fine-tune it first: graphattn train tox21 --init {args.checkpoint}", file=sys.stderr)
        return 2
    moved = [f"--{k.replace('_', '-')}" for k in ("edges", "target", "features", "tu_text") if getattr(args, k, None)]
    if pipeline == "molecules" and moved:
        print(f"graphattn {args.command}: {', '.join(moved)}: for social-network checkpoints (where their input "
              "files are now); a molecule checkpoint reads --csv / --smiles", file=sys.stderr)
        return 2
    module = molecule_tasks if pipeline == "molecules" else social_tasks
    return getattr(module, args.command)(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
