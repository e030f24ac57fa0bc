"""Reading molecule tables: CSV, TSV and SMILES lists (``.smi``: ``SMILES [name]`` per line),
plain or gzipped, also from a pipe (the kind is sniffed from the first line), and finding a
named column in their header."""
from __future__ import annotations

import csv
import gzip
import io
import itertools
import re
import zlib
from pathlib import Path
from typing import List, Tuple

from graphattn.data.download import DataFileError
from graphattn.data.rawio import delimiter_hint

__all__ = ["SMILES_LIST_SUFFIXES", "sniff_table_kind", "read_csv_table", "find_column"]

#: SMILES list files (ZINC's ``.smi``, RDKit's SmilesWriter, Open Babel): one molecule per line,
#: ``SMILES [name ...]`` separated by white space, a header line optional
SMILES_LIST_SUFFIXES = (".smi", ".smiles", ".ism", ".can")
#: first-line words that make it a SMILES list's header
_SMILES_HEADER_WORDS = {"smiles", "smi", "canonical_smiles", "isomeric_smiles", "mol", "molecule", "structure"}


def _table_kind(path: Path) -> str:
    """``"smiles_list"`` (by suffix, also ``.gz``), ``"tsv"`` (``.tsv`` / ``.tab``) or ``"csv"``."""
    name = path.name.lower()
    name = name[:-3] if name.endswith(".gz") else name
    if name.endswith(SMILES_LIST_SUFFIXES):
        return "smiles_list"
    return "tsv" if name.endswith((".tsv", ".tab")) else "csv"


_SMILES_LINE = re.compile(r"(\S+(?:[ \t]+\|[^|]*\|)?)(?:\s+(.*))?$")


def _csv_like(line: str) -> bool:
    """A comma outside CXSMILES ``|...|`` blocks (SMILES never hold one), or a quoted first field."""
    return "," in re.sub(r"\|[^|]*\|", "", line) or line.lstrip().startswith('"')


def _parses(word: str) -> bool:
    """Whether RDKit parses ``word`` as a SMILES (its console noise silenced)."""
    from rdkit import Chem, rdBase  # optional dependency: `import graphattn` works without RDKit

    with rdBase.BlockLogs():
        return Chem.MolFromSmiles(word) is not None


def _names_smiles_column(line: str) -> bool:
    """A header line: one of its fields is a SMILES column name (``smiles``, ``canonical_smiles``...)."""
    return any(w.strip().strip('"').lower() in _SMILES_HEADER_WORDS for w in re.split(r"[\t,;]|\s+", line))


def sniff_table_kind(first: str) -> str:
    """The kind of a table with no telling name (a pipe) from its first line: a header-less
    SMILES list when its first word is a SMILES RDKit parses (and no field names a SMILES
    column), else TSV with a tab, CSV with a comma or semicolon (the reader then says so), else
    a SMILES list with a header (one column: ``smiles``, or ``smiles name``)."""
    words = first.split()
    if words and not _names_smiles_column(first) and _parses(words[0]):
        return "smiles_list"  # no header: the first word is a molecule
    if "\t" in first:
        return "tsv"
    return "csv" if _csv_like(first) or ";" in first else "smiles_list"


def _sniffed_kind(kind: str, first: str, path: Path) -> str:
    """The kind a suffix suggested, checked against the first line: a comma-separated file saved
    as ``.smi`` (see below), or ``.tsv`` without tabs, is a CSV; a name without a suffix (``/dev/stdin``,
    ``/dev/fd/63``) is sniffed (:func:`sniff_table_kind`)."""
    words = first.split()
    # a CSV saved as .smi: a comma or semicolon in its first word, or commas after a first word
    # that is no SMILES ("Compound ID,SMILES"; not "CC(C)(C)C 2,2-dimethylpropane")
    if kind == "smiles_list" and words and (("," in words[0] or ";" in words[0] or _csv_like(first))
                                             and not _parses(words[0])):
        return "csv"
    if kind == "tsv" and "\t" not in first and _csv_like(first):
        return "csv"
    if kind == "csv" and not path.suffix and first.strip():
        return sniff_table_kind(first)
    return kind


#: a word written only with SMILES' bracket-free atoms and ring-closure digits (``C1CC``,
#: ``c1ccnc1``): a SMILES, valid or not, never a column name
_SMILES_LIKE = re.compile(r"(?:Cl|Br|[BCNOPSFI]|[bcnops]|\d)+")


def _smiles_list_header(words: List[str]) -> bool:
    """Whether the first line of a SMILES list is a header: its first word is a known column
    name, or it is a plain word (letters, digits, ``_``) RDKit cannot parse (``SMILES``, ``Name``)
    and could not be a SMILES either (a header-less list starting with an invalid SMILES such
    as ``c1ccnc1`` or ``C1CC`` keeps that row, reported invalid like any other)."""
    if words[0].lower() in _SMILES_HEADER_WORDS:
        return True
    return (bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", words[0])) and not _SMILES_LIKE.fullmatch(words[0])
            and not _parses(words[0]))


def _read_smiles_list(text, header_only: bool) -> Tuple[List[str], List[Tuple[int, List[str]]]]:
    """A SMILES list as a table: the header line's words (or ``smiles, name`` when there is
    none) and ``(file line, [smiles, name...])``; the last column takes the rest of the line."""
    header, rows = None, []
    for line_no, line in enumerate(text, 1):
        words = line.split()
        if not words:
            continue
        if header is None:
            if _smiles_list_header(words):
                header = words
                continue
            header = ["smiles", "name"]
        if header_only:
            break
        smiles, rest = _SMILES_LINE.match(line.strip()).groups()  # a CXSMILES "|...|" stays with its SMILES
        fields = [smiles] + (rest.split(None, len(header) - 2) if rest and len(header) > 1 else [])
        rows.append((line_no, fields + [""] * (len(header) - len(fields))))
    return header or [], rows


def read_csv_table(path, header_only: bool = False) -> Tuple[List[str], List[Tuple[int, List[str]]]]:
    """Header (names stripped) and ``(file line, fields)`` pairs of a CSV or gzipped CSV
    (detected by its magic bytes, whatever the name); UTF-8 with or without BOM; blank lines
    skipped; a record spanning lines (a quoted line break) has the number of its first line.
    Tab-separated files (``.tsv`` / ``.tab``) and SMILES lists (``.smi`` / ``.smiles`` / ``.ism``
    / ``.can``, optionally gzipped: ``SMILES [name]`` per line, white space between, with or
    without a header line; without one the columns are ``smiles`` and ``name``) read too.
    Raises :class:`DataFileError` for an empty, truncated or malformed file.
    ``header_only``: read the header row only (rows ``[]``)."""
    path = Path(path).expanduser()
    kind = _table_kind(path)
    try:
        f = open(path, "rb")  # opened once and peeked: a pipe (/dev/stdin, <(...)) reads too
        gz = f.peek(2)[:2] == b"\x1f\x8b"
        raw = gzip.GzipFile(fileobj=f, mode="rb") if gz else f
        with f, raw, io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as stream:
            head = []  # the lines up to the first one with text: it decides what a suffix only suggested
            for line in stream:
                head.append(line)
                if line.strip():
                    break
            kind = _sniffed_kind(kind, head[-1] if head else "", path)
            if kind == "smiles_list":
                header, rows = _read_smiles_list(itertools.chain(head, stream), header_only)
                if not header:
                    raise DataFileError(f"{path}: empty file (no SMILES)")
                return header, rows
            skipped = max(len(head) - 1, 0)  # blank lines before the header: not read as an empty header
            reader = csv.reader(itertools.chain(head[-1:], stream), delimiter="\t" if kind == "tsv" else ",")
            header = next(reader, None)
            if not header:
                raise DataFileError(f"{path}: empty file (no header row)")
            header = [h.strip() for h in header]
            rows = []
            while not header_only:
                start = reader.line_num + 1  # a quoted field may span lines: report the first
                fields = next(reader, None)
                if fields is None:
                    break
                if not fields or (len(fields) == 1 and not fields[0].strip()):
                    continue  # blank line
                if len(fields) != len(header):
                    hint = delimiter_hint(",".join(header)) if kind == "csv" else ""
                    raise DataFileError(
                        f"{path}: row {start + skipped} has {len(fields)} fields but the header "
                        f"has {len(header)}" + (hint or "; the file is truncated or malformed"))
                rows.append((start + skipped, fields))
    except FileNotFoundError as exc:
        raise DataFileError(f"{path}: no such file") from exc
    except IsADirectoryError as exc:
        raise DataFileError(f"{path} is a folder, not a file") from exc
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as "
                            "UTF-8 (e.g. Excel: 'CSV UTF-8'), or the file is corrupt") from exc
    except (OSError, EOFError, csv.Error, gzip.BadGzipFile, zlib.error) as exc:
        what = {"csv": "CSV", "tsv": "TSV", "smiles_list": "a SMILES list"}[kind]
        raise DataFileError(f"{path}: cannot read as {what} ({type(exc).__name__}: {exc}); "
                            "the file is truncated or corrupt") from exc
    return header, rows


def find_column(header: List[str], name: str, path, flag: str = "") -> int:
    """Index of column ``name`` in ``header``: the exact name, else the one column equal to it
    case-insensitively (both stripped of whitespace). :class:`DataFileError` when there is
    none (naming the columns that contain ``name`` and ``flag``, the option that chooses the
    column), or when several columns match (the same name twice, or names differing in case)."""
    name = str(name).strip()
    exact = [i for i, h in enumerate(header) if h == name]
    match = exact or [i for i, h in enumerate(header) if h.lower() == name.lower()]
    if len(match) == 1:
        return match[0]
    if match:
        raise DataFileError(f"{path}: column {name!r} is ambiguous: columns "
                            f"{', '.join(str(i + 1) for i in match)} ({[header[i] for i in match]}) match it")
    hint = delimiter_hint(header[0]) if len(header) == 1 else ""
    near = [h for h in header if name.lower() in h.lower()]
    if near and not hint:
        hint = f"; did you mean {' or '.join(map(repr, near[:3]))}{f' ({flag})' if flag else ''}?"
    elif flag and not hint:
        hint = f" (choose one with {flag})"
    raise DataFileError(f"{path}: no column {name!r}; columns are {header}{hint}")
