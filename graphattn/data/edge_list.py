"""Edge lists as people have them: a MUSAE CSV with a header (``id_1,id_2``), a headerless CSV, a
SNAP or KONECT text file (tab or space separated, ``#`` / ``%`` comment lines), semicolons, quoted
fields, any line ends, plain or gzipped. One edge per row, two int64 node ids; a bad row is a
:class:`~graphattn.data.download.DataFileError` naming the file's row and showing it as text.

Checked and parsed with numpy a few MB at a time (no Python loop over millions of rows)."""
from __future__ import annotations

import re
from typing import List, Optional, Tuple

import numpy as np

from graphattn.data.download import DataFileError, PathLike
from graphattn.data.rawio import parse_int_tokens, read_bytes

__all__ = ["read_edge_list", "edge_row_number", "EDGE_CHUNK"]


def _fields(line: bytes, sep: Optional[bytes]) -> List[bytes]:
    """The fields of one edge row: split at ``sep``, or at runs of whitespace when ``sep`` is None."""
    return [f.strip() for f in line.split(sep)] if sep is not None else line.split()


def _show(b: bytes, n: int = 60) -> str:
    """Up to ``n`` bytes of a file as text for a message (never a bytes repr)."""
    return repr(b[:n].decode("utf-8", "replace"))


def _edge_row_problem(line: bytes, sep: Optional[bytes]) -> Optional[str]:
    """Why one data row of an edge list is not two int64 ids, or ``None``."""
    fields = _fields(line, sep)
    if len(fields) != 2:
        return f"has {len(fields)} fields"
    for f in fields:
        try:
            v = int(f)
        except ValueError:
            return f"field {_show(f, 30)} is not an integer id"
        if not -2 ** 63 < v < 2 ** 63 - 1:
            return f"id {v} is beyond the int64 range"
    return None


EDGE_CHUNK = 1 << 22  # bytes of edge rows checked and parsed at a time (~20x that in temporaries:
# a 74 MB file of 5M rows peaked at +1.39 GB read whole, +0.29 GB in chunks)
_SPACE = np.frombuffer(b" \t\n\x0b\x0c", dtype=np.uint8)
_COMMENT = re.compile(rb"(?m)^[ \t]*[#%][^\n]*")  # SNAP's '#' and KONECT's '%' comment lines


def _edge_rows(path, body: bytes, start: int, end: int, first_row: int, sep: Optional[bytes],
               like: str) -> np.ndarray:
    """The ``(rows, 2)`` ids of ``body[start:end]`` (whole lines; ``first_row``: the file's row
    number of its first line, for errors; ``sep``: the field separator, None for whitespace)."""
    # two fields per non-blank row (a 3-field row must not be re-paired with the next one),
    # counted per line with numpy: no Python loop over millions of edge rows
    buf = np.frombuffer(body, dtype=np.uint8, count=end - start, offset=start)
    line_of = np.cumsum(buf == ord("\n"))  # line number of every byte (newlines end their line)
    n_lines = int(line_of[-1]) + 1 if buf.size else 0
    text = ~np.isin(buf, _SPACE)
    nonblank = np.bincount(line_of[text], minlength=n_lines) > 0
    if sep is not None:
        fields = np.bincount(line_of[buf == sep[0]], minlength=n_lines) + 1
    else:  # a field starts where text follows whitespace or the line's start
        starts = text.copy()
        starts[1:] &= ~text[:-1]
        fields = np.bincount(line_of[starts], minlength=n_lines)
    del line_of, text
    bad_rows = np.flatnonzero(nonblank & (fields != 2))
    if bad_rows.size:
        i = int(bad_rows[0])
        ln = body[start:end].split(b"\n")[i]
        raise DataFileError(f"{path}: row {first_row + i} {_edge_row_problem(ln, sep)} ({_show(ln)}); "
                            f"every edge row must hold exactly two integer ids like {like}")
    n_rows = int(nonblank.sum())
    try:
        tok = parse_int_tokens(body[start:end] if sep is None else body[start:end].replace(sep, b" "), str(path))
    except DataFileError:
        tok = None
    if tok is None or tok.size != 2 * n_rows:
        bad = next(((i, p) for i, ln in enumerate(body[start:end].split(b"\n")) if ln.strip()
                    and (p := _edge_row_problem(ln, sep)) is not None), None)
        where = f"row {first_row + bad[0]} {bad[1]}; " if bad else ""
        raise DataFileError(f"{path}: {where}every row must hold exactly two integer ids "
                            "(truncated or malformed file?)")
    return tok.reshape(-1, 2)


def _is_id(field: bytes) -> bool:
    return field.lstrip(b"+-").isdigit()


def _edge_layout(path, raw: bytes) -> Tuple[List[str], Optional[bytes], int, int]:
    """``(column names, separator, offset of the first edge row, its file row number)`` of an edge
    list: comma, semicolon, tab or space separated, a header of two names or none (then the names are
    ``source``, ``target``)."""
    pos, row = 0, 1
    while pos < len(raw):  # blank lines before the first row (comments are blank by now)
        nl = raw.find(b"\n", pos)
        nl = len(raw) if nl < 0 else nl
        if raw[pos:nl].strip():
            break
        pos, row = nl + 1, row + 1
    if pos >= len(raw):
        return ["source", "target"], b",", len(raw), row
    nl = raw.find(b"\n", pos)
    first = raw[pos:] if nl < 0 else raw[pos:nl]
    sep = next((c for c in (b",", b";") if c in first), None)  # else tabs / spaces
    fields = _fields(first, sep)
    if len(fields) != 2:
        raise DataFileError(
            f"{path}: expected two columns of node ids (comma, semicolon, tab or space separated; a header "
            f"like 'id_1,id_2' is optional), the first row {_show(first)} has {len(fields)} field(s)")
    after = len(raw) if nl < 0 else nl + 1
    if all(_is_id(f) for f in fields):  # no header: this row is an edge
        return ["source", "target"], sep, pos, row
    if any(_is_id(f) for f in fields):
        raise DataFileError(f"{path}: the first row {_show(first)} is neither a header of two names nor an "
                            "edge of two integer ids")
    return [f.decode("utf-8-sig", "replace") for f in fields], sep, after, row + 1


def _edge_text(path: PathLike) -> bytes:
    """An edge file's bytes with LF line ends, no quotes, no byte-order mark and its comment lines blank."""
    raw = read_bytes(path)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    if b"\r" in raw:  # CRLF and Mac's CR-only line ends
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if b'"' in raw:  # every field quoted ("0","1"): valid CSV, and integer ids never hold a quote
        raw = raw.replace(b'"', b"")
    if b"#" in raw or b"%" in raw:  # comment lines become blank lines: the row numbers stay the file's
        raw = _COMMENT.sub(b"", raw)
    return raw


def edge_row_number(path: PathLike, k: int) -> int:
    """The file row (1-based) of the ``k``-th edge (0-based) of an edge file, for an error message."""
    raw = _edge_text(path)
    _, _, pos, row = _edge_layout(path, raw)
    for i, line in enumerate(raw[pos:].split(b"\n")):
        if line.strip():
            if k == 0:
                return row + i
            k -= 1
    return row


def read_edge_list(path: PathLike) -> Tuple[List[str], np.ndarray, np.ndarray]:
    """``(column names, sources, targets)`` of an edge list as people have them: a MUSAE CSV with a
    header, a headerless CSV, a SNAP/KONECT text file (tab or space separated, ``#``/``%`` comment
    lines), plain or gzipped, any line ends, fields quoted or not."""
    raw = _edge_text(path)
    names, sep, pos, row = _edge_layout(path, raw)
    like = f"the header {(chr(sep[0]) if sep else ' ').join(names)!r}" if names != ["source", "target"] \
        else "the first row"
    # the rows in chunks of whole lines: the per-byte checks would need ~20x the file at once
    parts = []
    while pos < len(raw):
        cut = raw.find(b"\n", min(pos + EDGE_CHUNK, len(raw)) - 1)
        cut = len(raw) if cut < 0 else cut + 1
        parts.append(_edge_rows(path, raw, pos, cut, row, sep, like))
        row += raw.count(b"\n", pos, cut)
        pos = cut
    pairs = np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)
    return names, pairs[:, 0], pairs[:, 1]
