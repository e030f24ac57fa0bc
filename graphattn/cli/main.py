"""Command line: ``graphattn train | tune | evaluate | predict | explain | export | pretrain | download | bench``.

Staged as chemprop's commands are: the options (:mod:`graphattn.cli.arguments`, no torch import) are
parsed and their paths checked first; then :mod:`graphattn.cli.commands` validates, builds and runs the
command (molecule tasks in :mod:`graphattn.cli.molecules_train`, social networks in
:mod:`graphattn.cli.social_train`, chosen by dataset name, input-file option or the checkpoint's
``pipeline``). This module turns what goes wrong around a run (a closed pipe, a full disk, Ctrl-C)
into one line and an exit status.
"""
from __future__ import annotations

import errno
import os
import sys
import warnings
from pathlib import Path
from typing import List, Optional

from graphattn.cli.arguments import build_parser
from graphattn.cli.config_file import read_config
from graphattn.cli.names import check_dataset_name
from graphattn.cli.options import check_paths, given_options, usage_error
from graphattn.utils.provenance import record_command

__all__ = ["main", "build_parser", "OPTIONAL_MODULES"]

#: optional dependencies: top-level module -> (what it is for, the extra that installs it)
OPTIONAL_MODULES = {
    "rdkit": ("molecules (SMILES parsing, featurisation, descriptors, pictures)", "molecules"),
    "matplotlib": ("pictures (explain, parity plots, charts)", "viz"),
    "triton": ("the fused CUDA kernels", "gpu"),
    "chemprop": ("the chemprop baseline of the benchmarks", "bench"),
    "descriptastorus": ("chemprop's normalised descriptors (--descriptors rdkit2d_normalized)", "molecules"),
    "optuna": ("the hyperparameter search (graphattn tune)", "tune"),
}


def missing_extra_line(command: Optional[str], exc: ModuleNotFoundError) -> Optional[str]:
    """The one line for an optional dependency that is not installed (``None`` for any other module):
    what it is needed for and the ``pip install`` line of its extra."""
    root = (exc.name or "").split(".")[0]
    if root not in OPTIONAL_MODULES:
        return None
    what, extra = OPTIONAL_MODULES[root]
    return (f"graphattn{' ' + command if command else ''}: this needs {root} for {what}, which is not "
            f"installed: pip install 'graphattn[{extra}]'")


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
    except ModuleNotFoundError as exc:
        line = missing_extra_line(argv_command(argv), exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
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
    record_command(["graphattn", *(sys.argv[1:] if argv is None else argv)])
    try:
        check_paths(args)
        if getattr(args, "config", None):  # the file's values are defaults: the flags given still win
            config = read_config(args.config)
            given = given_options(args, build_parser().parse_args(["train"]))
            if given & {"seed", "seeds"}:  # --seed or --seeds on the command line replaces the file's choice
                config = {k: v for k, v in config.items() if k not in ("seed", "seeds")}
            args = build_parser(config).parse_args(argv)
            check_paths(args)
        if args.command in ("train", "tune"):
            check_dataset_name(args.dataset)
        if args.command == "download":
            for name in args.names:
                check_dataset_name(name, files=False)
    except ValueError as exc:
        return usage_error(args.command, str(exc))
    warnings.formatwarning = _one_line_warning
    if getattr(args, "data_root", None):  # the one place a command line sets the data root
        os.environ["GRAPHATTN_DATA"] = str(Path(args.data_root).expanduser().resolve())
    from graphattn.cli import commands  # after parsing: --help and bad options never import torch

    return commands.COMMANDS[args.command](args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
