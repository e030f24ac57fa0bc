"""Progress bars that suit where they are written: tqdm's live bar on a terminal; in a log file or a
pipe (CI, ``nohup``, ``2> log``) one plain line at most every :data:`LOG_INTERVAL` seconds and a last
line at the end, never the ``\\r`` redraw fragments a live bar leaves in a file."""
from __future__ import annotations

import sys
from typing import Any, Optional

from tqdm.auto import tqdm

__all__ = ["progress_bar", "LOG_INTERVAL", "announce"]

#: seconds between two progress lines when stderr is not a terminal
LOG_INTERVAL = 30.0


class _Lines:
    """A file for tqdm that turns each redraw into one line (``\\r`` dropped, a newline added)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        text = text.replace("\r", "").replace("\x1b[A", "").rstrip(" ")
        if text.strip():
            self.stream.write(text if text.endswith("\n") else text + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def progress_bar(iterable: Any = None, *, disable: bool = False, file: Optional[Any] = None, **kwargs) -> tqdm:
    """``tqdm(iterable, **kwargs)`` on a terminal; elsewhere a line every :data:`LOG_INTERVAL` s and the
    final state (``leave`` is then always on, so a log ends with the finished line)."""
    stream = file if file is not None else sys.stderr
    if disable or _is_terminal(stream):
        return tqdm(iterable, disable=disable, file=file, **kwargs)
    kwargs.update(leave=True, mininterval=LOG_INTERVAL, maxinterval=LOG_INTERVAL, miniters=1, dynamic_ncols=False,
                  ncols=100)
    return tqdm(iterable, file=_Lines(stream), **kwargs)


def announce(message: str) -> None:
    """One line on stderr about a long step that shows no bar (e.g. under ``--no-progress``)."""
    print(message, file=sys.stderr, flush=True)
