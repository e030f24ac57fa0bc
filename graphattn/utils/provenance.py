"""Where a run's numbers come from: the command line that made it and the package's git commit."""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence

__all__ = ["record_command", "command_line", "source_commit"]

_COMMAND: List[Optional[str]] = [None]  # set by the command line's main(); else the process's argv


def record_command(argv: Sequence[str]) -> None:
    """Record the command being run (``["graphattn", "train", ...]``) for :func:`command_line`."""
    _COMMAND[0] = shlex.join(str(a) for a in argv)


def command_line() -> str:
    """The recorded command, else this process's own command line."""
    if _COMMAND[0] is not None:
        return _COMMAND[0]
    return shlex.join([Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python", *sys.argv[1:]])


def source_commit() -> Optional[str]:
    """The git commit of the package's source when it runs from a checkout (``+dirty`` when tracked
    files differ from it), else ``None`` (an installed wheel, no git)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")
