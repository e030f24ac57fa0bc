"""Where the molecule pipeline's files go and come from: the featurized cache, and input files read once
(a pipe or process substitution is spooled into a temporary file first, gzip told by its content)."""
from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
import zlib
from pathlib import Path

from graphattn.data.download import cache_root
from graphattn.data.smiles_table import sniff_table_kind

__all__ = ["cache_dir", "spooled"]


def cache_dir() -> Path:
    """Where the pipeline's datasets cache their featurized molecules: ``$GRAPHATTN_CACHE`` if
    set, else ``~/.cache/graphattn`` (:func:`graphattn.data.download.cache_root`). Never the
    data root (``$GRAPHATTN_DATA``), which may be a read-only shared copy: whether it is
    writable plays no part. A cache folder that cannot be created or written falls back to
    ``~/.cache/graphattn`` (see :mod:`graphattn.data.molecules`)."""
    return cache_root()


def _sniffed_suffix(head: bytes) -> str:
    """The table kind of a pipe's first bytes as a file suffix (``.tsv``, ``.csv``, ``.smi``)."""

    if head[:2] == b"\x1f\x8b":  # gzipped: look at the start of its text
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 1 << 16)
        except zlib.error:
            return ".csv"

    line = next((ln for ln in head.splitlines() if ln.strip()), b"").decode("utf-8", "replace").lstrip("\ufeff")
    return {"tsv": ".tsv", "csv": ".csv", "smiles_list": ".smi"}[sniff_table_kind(line)]


def spooled(path) -> str:
    """``path``, or for a pipe (``/dev/stdin``, ``<(...)``) a temporary copy of what it carries:
    the dataset reads its file more than once (hash, header, rows)."""
    p = Path(path).expanduser()
    if not p.exists() or p.is_file() or p.is_dir():  # a folder: the reader names it
        return str(path)
    folder = Path(tempfile.mkdtemp(prefix="graphattn-stdin-"))
    atexit.register(shutil.rmtree, folder, True)
    h, part, head = hashlib.sha256(), folder / "stdin.part", b""
    with open(p, "rb") as src, open(part, "wb") as dst:  # streamed: a large pipe is not held in memory
        for block in iter(lambda: src.read(1 << 20), b""):
            h.update(block)
            dst.write(block)
            head = head or block
    # named by content: the processed cache (keyed by the file's name) is reused, not re-made per run;
    # the suffix says how to read it (a pipe has no name): tabs TSV, commas CSV, else a SMILES list
    tmp = folder / f"stdin-{h.hexdigest()[:16]}{_sniffed_suffix(head)}"
    part.rename(tmp)
    return str(tmp)
