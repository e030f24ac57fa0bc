"""File helpers shared by the data readers, the training loop and the commands: permissions of
atomically written files, CSV output (also to standard output or a pipe) and checks of output
paths before any work is done."""
from __future__ import annotations

import csv
import gzip
import io
import os
import sys
import tempfile
from pathlib import Path
from typing import Dict

__all__ = ["save_figure", "current_umask", "plain_mode", "fd_link", "is_stdout", "write_csv", "check_output_not_input",
           "out_path", "check_out_folder"]


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it (``os.umask`` can only
    be read by setting it, briefly giving other threads' new files a 0 umask)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def plain_mode(path, mode: int = 0o666) -> None:
    """The permissions a plain ``open(path, "w")`` (``mode=0o777``: ``mkdir``) would give
    (mkstemp / mkdtemp create 0600 / 0700: colleagues sharing a group folder could not read them)."""
    os.chmod(path, mode & ~current_umask())


def fd_link(path: Path) -> bool:
    """Whether ``path`` names an open file descriptor (``/dev/std*``, ``/dev/fd/N``, ``/proc/*/fd/N``,
    or a link through them)."""
    p = str(path)
    for _ in range(16):
        if p.startswith(("/dev/fd/", "/proc/self/fd/", "/dev/stdin", "/dev/stdout", "/dev/stderr")) or \
                (p.startswith("/proc/") and "/fd/" in p):
            return True
        if not os.path.islink(p):
            return False
        target = os.readlink(p)
        p = target if os.path.isabs(target) else os.path.join(os.path.dirname(p), target)
    return False


def is_stdout(path: Path) -> bool:
    """Whether ``path`` is the file this process's standard output writes to."""
    try:
        a, b = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real fd (captured output, notebooks)
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def write_csv(path, fields, rows) -> None:
    """``rows`` (dicts) as a CSV with header ``fields``, written to a temporary file and renamed,
    so a failed write (full disk) leaves an earlier file intact. A ``path`` that exists and is
    not a regular file (a FIFO, a device) is written through, one naming an open descriptor
    (``/dev/stdout``, ``/dev/stderr``) appended to, never replaced; an ordinary link's target
    is replaced (the link kept). ``"-"``: standard output (``sys.stdout``); a name ending in ``.gz``
    is written gzip-compressed."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields))
    w.writeheader()
    w.writerows(rows)
    if str(path) == "-":  # the usual spelling of standard output (predict --out -)
        sys.stdout.write(buf.getvalue())
        sys.stdout.flush()
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fd_link(path):
        # /dev/stdout, /dev/stderr, /dev/fd/N -> /proc/self/fd/N -> whatever the shell opened: our own
        # stdout through sys.stdout, others appended to (reopening with "w" truncated a `>> log`)
        if is_stdout(path):
            sys.stdout.write(buf.getvalue())
            sys.stdout.flush()
            return
        with open(path, "a", newline="") as f:
            f.write(buf.getvalue())
        return
    if path.is_symlink():
        path = path.resolve()  # an ordinary link: its target is replaced atomically, the link kept
    if path.exists() and not path.is_file():  # FIFOs, devices: written through, never replaced
        with open(path, "w", newline="") as f:
            f.write(buf.getvalue())
        return
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        if path.suffix.lower() == ".gz":  # predictions.csv.gz: gzip-compressed, as the name says
            with os.fdopen(fd, "wb") as f:
                f.write(gzip.compress(buf.getvalue().encode(), mtime=0))
        else:
            with os.fdopen(fd, "w", newline="") as f:
                f.write(buf.getvalue())
        plain_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_output_not_input(out: Path, inputs: Dict[str, object]) -> None:
    """ValueError when writing ``out`` would replace one of the command's ``inputs`` (``{what:
    path}``: the checkpoint, the ``--csv`` file, ...) or any existing checkpoint (``*.pt``)."""
    if not out.is_file():  # a new file, or /dev/stdout, a terminal, a pipe: nothing to replace
        return
    for what, path in inputs.items():
        try:
            same = path is not None and os.path.samefile(out, path)
        except OSError:
            same = False
        if same:
            raise ValueError(f"--out {out} is {what}: writing there would replace it; choose another file")
    if out.suffix == ".pt":
        raise ValueError(f"--out {out} is an existing checkpoint file (.pt); write predictions to a .csv")


def out_path(out, default_name: str) -> Path:
    """``out``, or ``out/default_name`` when ``out`` is an existing folder or ends with a slash
    (a folder not made yet): what ``predict`` / ``explain`` write to."""
    path = Path(out)
    if path.is_dir() or str(out).endswith(("/", "\\")):
        return path / default_name
    return path


def check_out_folder(out, name: str = "--out") -> None:
    """ValueError when ``out`` (a run's output folder; ``name``: how the caller spells it, e.g.
    ``fit``'s ``out_dir``) names an existing file, lies under one, or is not writable: found
    before any data is read or epoch trained, not at the first checkpoint."""
    if out is None:
        return
    if Path(out).exists() and not Path(out).is_dir():
        raise ValueError(f"{name} {out} is a file, not a folder")
    parent = next((p for p in Path(out).parents if p.exists()), None)  # the nearest existing ancestor
    if parent is not None and not parent.is_dir():
        raise ValueError(f"{name} {out}: {parent} is a file, so no folder can be made under it")
    here = Path(out) if Path(out).is_dir() else parent
    if here is not None and not os.access(here, os.W_OK | os.X_OK):  # read-only mount or permissions
        raise ValueError(f"{name} {out}: {here} is not writable")


def save_figure(fig, path, title: str = "") -> Path:
    """Lay out a matplotlib ``Figure`` (``title`` above it) and write it to ``path`` in the format of its
    suffix (PNG or SVG; PNG without one); the path."""
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format=(path.suffix.lstrip(".") or "png").lower())
    return path
