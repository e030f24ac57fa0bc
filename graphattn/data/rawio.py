"""Low-level raw-file reading shared by the dataset readers (social node and graph sets).

Plain or gzip-compressed bytes and UTF-8 text, integer tokens at C speed, CSV rows and
JSON with :class:`~graphattn.data.download.DataFileError` on malformed content, label
normalisation (missing labels, ``"1"`` = ``"1.0"``, booleans in any case; the same
canonical spelling for one name via :func:`canonical_label`), numpy
set operations on int arrays (unique, unique pairs, undirected edge lists), zip member
checks for :func:`~graphattn.data.download.find_file`, and dataset-name normalisation.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zipfile
import zlib
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

from graphattn.data.download import DataFileError, PathLike

__all__ = ["JSONObject", "read_bytes", "read_text", "parse_int_tokens", "check_int64_range", "csv_rows",
           "parse_json", "delimiter_hint", "sniff_delimiter", "MISSING_LABELS", "ALWAYS_MISSING_LABELS", "as_number", "canonical_label",
           "label_codes", "sorted_unique",
           "unique_pairs", "undirected_edge_index", "zip_check", "canonical_name"]


def read_bytes(path: PathLike) -> bytes:
    """Whole file as bytes, transparently gunzipping ``*.gz`` (or gzip magic)."""
    path = Path(path).expanduser()
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (EOFError, OSError, gzip.BadGzipFile, zlib.error) as exc:
            raise DataFileError(f"{path}: corrupt or truncated gzip file ({exc})") from exc
    return raw


def read_text(path: PathLike) -> str:
    """Whole file (plain or gzip) as UTF-8 text, a leading byte-order mark dropped."""
    try:
        return read_bytes(path).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{path}: not UTF-8 text ({exc})") from exc


_LONE_SIGN = re.compile(rb"[+-](?![0-9])")


def has_lone_sign(buf: bytes) -> bool:
    """Whether ``buf`` holds a ``+``/``-`` not followed by a digit (C speed): ``np.fromstring``
    reads such a sign as 0 at the end of the text and joins it to the next token across
    whitespace, where an integer is wanted."""
    return _LONE_SIGN.search(buf) is not None


def parse_int_tokens(buf: bytes, what: str, sep: bytes = b" ") -> np.ndarray:
    """All integers in ``buf`` (whitespace/``sep`` separated) as int64, C speed; integers
    beyond int64 are a :class:`DataFileError` (not silently clipped)."""
    if sep != b" ":
        buf = buf.replace(sep, b" ")
    if not buf.strip():
        return np.zeros(0, dtype=np.int64)
    if has_lone_sign(buf):
        raise DataFileError(f"{what}: non-integer token '+' or '-' (a sign without digits after it)")
    try:
        out = np.fromstring(buf, dtype=np.int64, sep=" ")  # noqa: NPY201 (text mode is supported)
    except ValueError as exc:
        raise DataFileError(f"{what}: non-integer token ({exc})") from exc
    check_int64_range(out, what)
    return out


_I64 = np.iinfo(np.int64)


def check_int64_range(tok: np.ndarray, what: str) -> None:
    """``np.fromstring`` saturates integers beyond int64 at its limits without an error:
    a :class:`DataFileError` when ``tok`` holds one of the two limits."""
    if tok.size and (int(tok.max()) == _I64.max or int(tok.min()) == _I64.min):
        raise DataFileError(f"{what}: an integer beyond the int64 range "
                            f"[{_I64.min}, {_I64.max})")


def delimiter_hint(header_line: str) -> str:
    """`` (semicolon-separated? ...)`` when a header read as CSV looks separated by something
    else (European Excel's semicolons, a tab-separated export named .csv); else ``""``."""
    if "," in header_line:
        return ""
    if ";" in header_line:
        return " (the header is separated by semicolons, as European Excel writes: save it comma-separated)"
    if "\t" in header_line:
        return " (the header is separated by tabs: name the file .tsv, or save it comma-separated)"
    return ""


def sniff_delimiter(text: str) -> str:
    """The field separator of a small table from its first non-blank line: a comma when it has one,
    else a tab, a semicolon, or a space (runs of spaces, as ``id label`` text files are written)."""
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    return next((c for c in (",", "\t", ";") if c in first), " " if " " in first.strip() else ",")


def csv_rows(text: str, what: str, delimiter: str = ",") -> Tuple[List[str], List[List[str]]]:
    """``(header, rows)`` of CSV ``text``: blank (also whitespace-only) rows dropped, header
    cells stripped. Any line ends (CRLF, LF, Mac's CR-only). ``delimiter`` ``" "``: runs of spaces."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, skipinitialspace=delimiter == " ")
    rows = [r for r in reader if r and any(c.strip() for c in r)]
    if delimiter == " ":
        rows = [[c for c in r if c] for r in rows]  # a trailing space is no empty field
    if not rows:
        raise DataFileError(f"{what}: empty CSV file")
    return [h.strip() for h in rows[0]], rows[1:]


class JSONObject:
    """A JSON object as its ``(key, value)`` pairs in file order, repeated keys included (a ``dict``
    would keep only the last of them): :func:`parse_json` with ``pairs=True``."""

    def __init__(self, pairs):
        self.pairs = list(pairs)


def parse_json(text: str, what: str, *, pairs: bool = False):
    """``json.loads(text)``, a :class:`DataFileError` naming ``what`` when it is invalid. With ``pairs``
    every object is a :class:`JSONObject`, so that a key given twice can be seen."""
    try:
        return json.loads(text, object_pairs_hook=JSONObject if pairs else None)
    except json.JSONDecodeError as exc:
        head = text.lstrip()[:1]
        if head and head not in "{[":  # not JSON at all, e.g. a CSV given where JSON belongs
            first = text.lstrip().splitlines()[0][:60]
            raise DataFileError(f"{what}: not a JSON file (it starts with {first!r}"
                                + ("; it looks like a CSV" if "," in first else "") + ")") from exc
        raise DataFileError(f"{what}: invalid JSON (truncated?): {exc}") from exc


#: label cells that always mean "no label" (compared lower-cased, stripped): y = -1
ALWAYS_MISSING_LABELS = frozenset({"", "nan"})
#: label cells meaning "no label" (compared lower-cased, stripped) when every other present
#: label is a number or a boolean; ``"NA"``, ``"N/A"``, ``"null"``, ``"None"`` are real
#: classes among string labels (``"NA"`` = North America), only ``""``/``"nan"`` never are;
#: Excel's ``#N/A`` and the ``?`` / ``-`` placeholders of hand-made sheets too
MISSING_LABELS = frozenset({"", "na", "n/a", "#n/a", "nan", "null", "none", "?", "-"})


def as_number(s: str):
    """``int`` or ``float`` value of a label string (``"1.0"`` -> 1), ``None`` if not numeric."""
    try:
        return int(s)
    except ValueError:
        pass
    try:
        v = float(s)
    except ValueError:
        return None
    if v != v:  # "-nan" and the like: not a class
        return None
    return int(v) if v.is_integer() else v


def _is_bool(s: str) -> bool:
    return s.lower() in ("true", "false")


def canonical_label(name: str) -> str:
    """The normalised spelling of one class name, as :func:`label_codes` writes it for
    numeric or boolean labels: stripped; a number as its shortest int/float text
    (``"1.0"``, ``"1e0"`` -> ``"1"``); a boolean capitalised (``"true"`` -> ``"True"``);
    anything else just stripped. For comparing class names stored in a checkpoint (made
    before labels were normalised) with those of a reloaded dataset: map both lists through
    it. Only names are compared; a list whose *order* changed (old string order ``"10"`` <
    ``"2"`` vs numeric ``"2"`` < ``"10"``) still differs, as its codes do."""
    s = str(name).strip()
    if _is_bool(s):
        return s.capitalize()
    x = as_number(s)
    return s if x is None else str(x)


def label_codes(values: Sequence[str]) -> Tuple[np.ndarray, List[str]]:
    """Map label strings to 0..C-1 (missing ones to -1).

    Missing: ``""`` and ``"nan"`` (any case) always; ``"NA"``, ``"N/A"``, ``"null"`` and
    ``"None"`` (any case, :data:`MISSING_LABELS`) only when every other present label is a
    number or a boolean — among string labels they are classes. Labels are normalised
    before coding (see :func:`canonical_label`): when every present label is a number
    they are compared as numbers (``"1"`` and ``"1.0"`` are one class, named ``"1"``) and
    ordered numerically; when every one is a boolean (any case) they are
    ``"False" < "True"``; otherwise they are stripped strings in sorted order.

    Shapes: ``values`` (N,) -> codes (N,) int64 in -1..C-1, ``C`` class names.
    """
    vals = [v.strip() for v in values]
    cand = sorted(v for v in set(vals) if v.lower() not in ALWAYS_MISSING_LABELS)
    others = [v for v in cand if v.lower() not in MISSING_LABELS]
    if all(_is_bool(v) for v in others) or all(as_number(v) is not None for v in others):
        present = others  # numbers/booleans (or nothing but missing words): NA etc. = missing
    else:
        present = cand  # string labels: "NA", "None"... are classes
    if present and all(_is_bool(v) for v in present):
        canon = {v: canonical_label(v) for v in present}
        names = sorted(set(canon.values()))
    else:
        nums = {v: as_number(v) for v in present}
        if present and all(x is not None for x in nums.values()):
            canon = {v: str(x) for v, x in nums.items()}
            names = [str(x) for x in sorted(set(nums.values()))]
        else:
            canon, names = {v: v for v in present}, present
    pos = {c: i for i, c in enumerate(names)}
    index = {v: pos[c] for v, c in canon.items()}
    codes = np.fromiter((index.get(v, -1) for v in vals), dtype=np.int64, count=len(vals))
    return codes, names


def sorted_unique(a: np.ndarray, return_inverse: bool = False):
    """``np.unique`` by sort + diff (numpy 2.4's hash-based ``np.unique`` is ~100x slower
    on large int arrays here)."""
    a = np.asarray(a)
    s = np.sort(a, kind="stable")
    u = s[np.concatenate([[True], s[1:] != s[:-1]])] if s.size else s
    if return_inverse:
        return u, np.searchsorted(u, a)
    return u


def unique_pairs(src: np.ndarray, dst: np.ndarray, n: int) -> Tuple[np.ndarray, np.ndarray]:
    """The distinct ``(src, dst)`` pairs (node ids in 0..n-1), sorted by (src, dst).

    Shapes: ``src``, ``dst`` (E,) -> two arrays (E',), E' <= E.
    """
    m = max(int(n), 1)
    key = sorted_unique(np.asarray(src, dtype=np.int64) * m + np.asarray(dst, dtype=np.int64))
    return key // m, key % m


def undirected_edge_index(src: np.ndarray, dst: np.ndarray, num_nodes: int,
                          remove_self_loops: bool = True) -> Tuple[np.ndarray, int]:
    """Both directions, deduplicated, sorted by (src, dst); returns (edge_index, #self-loops).

    Shapes: ``src``, ``dst`` (E,) -> ``edge_index`` (2, E') with E' <= 2E.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    loops = src == dst
    n_loops = int(np.count_nonzero(loops))
    if remove_self_loops and n_loops:
        src, dst = src[~loops], dst[~loops]
    s, d = unique_pairs(np.concatenate([src, dst]), np.concatenate([dst, src]), num_nodes)
    return np.stack([s, d]), n_loops


def zip_check(members: Sequence[str]):
    """A ``check(path)`` for :func:`~graphattn.data.download.find_file`: the file is a zip
    archive holding every name in ``members``."""
    def check(path: Path) -> None:
        try:
            with zipfile.ZipFile(path) as zf:
                names = set(zf.namelist())
        except zipfile.BadZipFile as exc:
            raise DataFileError(f"{path}: not a zip file ({exc})") from exc
        lost = [m for m in members if m not in names]
        if lost:
            raise DataFileError(f"{path}: zip lacks {lost}")
    return check


def canonical_name(name: str, aliases: Dict[str, str], known: Sequence[str] = ()) -> str:
    """Lower-case ``name`` without spaces, mapped through ``aliases`` when listed there; a name
    that is still not one of ``known`` is matched with ``_`` and ``-`` taken as the same
    (``twitch_engb``, ``lastfm-asia``, ``IMDB_BINARY``), as the command line matches them."""
    key = name.lower().replace(" ", "")
    key = aliases.get(key, key)
    if not known or key in known:
        return key
    norm = lambda s: s.replace("_", "-")  # noqa: E731
    key = {norm(a): b for a, b in aliases.items()}.get(norm(key), key)
    return next((k for k in known if norm(k) == norm(key)), key)
