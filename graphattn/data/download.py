"""Finding, downloading and verifying raw data files.

Every dataset in graphattn reads its raw files from a *data root*:

1. the ``root=`` argument of the loader, if given;
2. otherwise ``$GRAPHATTN_DATA``;
3. otherwise the ``datasets/`` folder of a source checkout, or ``~/.cache/graphattn``.

A file that is present under the root is used as it is (after a structural check done by
the loader). A file that is absent is downloaded from its canonical public URL with a tqdm
progress bar into a temporary file, checked (sha256 when known, else by the loader's
structural check) and only then moved into place, so an interrupted or corrupt download
never leaves a file behind that later looks valid.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import io
import logging
import os
import sys
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from graphattn.utils.progress import progress_bar

from graphattn.utils.files import plain_mode

PathLike = Union[str, os.PathLike]

__all__ = ["writable_dir", "pyg_progress_to_log", "data_root", "cache_root", "find_file", "download_url", "sha256sum",
           "git_blob_sha1", "DataFileError"]


class DataFileError(ValueError):
    """A raw data file is missing, truncated or not in the expected format."""


def data_root(root: Optional[PathLike] = None) -> Path:
    """Resolve the data root: ``root`` > ``$GRAPHATTN_DATA`` > checkout ``datasets/`` > cache."""
    if root is not None:
        return Path(root).expanduser().resolve()  # resolved where it enters: later cwd changes do not move it
    env = os.environ.get("GRAPHATTN_DATA")
    if env:
        return Path(env).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[2] / "datasets"
    if (checkout / "README.md").exists():
        return checkout
    return Path.home() / ".cache" / "graphattn"


def cache_root(cache_dir: Optional[PathLike] = None) -> Path:
    """Where processed (featurized) data is cached: ``cache_dir`` > ``$GRAPHATTN_CACHE`` >
    ``~/.cache/graphattn``. Kept apart from the data root, which may be a read-only shared copy."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser().resolve()
    env = os.environ.get("GRAPHATTN_CACHE")
    return Path(env).expanduser().resolve() if env else Path.home() / ".cache" / "graphattn"


def sha256sum(path: PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def files_sha256(paths) -> Optional[str]:
    """One sha256 over the contents of ``paths`` (in the given order; ``None`` entries skipped),
    or ``None`` when one of them is not a readable file: what a run records to notice, later,
    that its input files changed."""
    h = hashlib.sha256()
    for p in paths:
        if p is None:
            continue
        try:
            st = os.stat(p)
            key = (str(Path(p).resolve()), st.st_size, st.st_mtime_ns)
            if key not in _DIGESTS:  # a run reads its files' digest several times: hashed once
                _DIGESTS[key] = sha256sum(p)
            h.update(_DIGESTS[key].encode())
        except OSError:
            return None
    return h.hexdigest()


_DIGESTS: dict = {}


def git_blob_sha1(path: PathLike, chunk: int = 1 << 20) -> str:
    """Git's blob id of a file: sha1 of ``b"blob <size>\\0"`` + its bytes. A file fetched from
    ``raw.githubusercontent.com/<owner>/<repo>/<commit>/<path>`` has the blob id that
    ``git ls-tree <commit> <path>`` lists, so a pinned id checks the download byte for byte."""
    h = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode())
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


_STALE_PART_SECONDS = 24 * 3600  # a .part file this old is left over from a killed download


def _remove_stale_parts(dest: Path) -> None:
    for p in dest.parent.glob(f"{glob.escape(dest.name)}.*.part"):
        try:
            if time.time() - p.stat().st_mtime > _STALE_PART_SECONDS:
                p.unlink()
        except OSError:
            pass


def download_url(url: str, dest: PathLike, sha256: Optional[str] = None,
                 check: Optional[Callable[[Path], None]] = None, progress: bool = True,
                 git_blob: Optional[str] = None) -> Path:
    """Download ``url`` to ``dest`` atomically, with a progress bar and an integrity check.

    The bytes received must match the server's ``Content-Length`` (a connection closed early
    ends a read without an error); ``sha256`` (hex) and ``git_blob`` (the file's git blob id,
    for files pinned at a GitHub commit) are compared when given; ``check(path)`` is called on
    the temporary file and should raise :class:`DataFileError` if the content is wrong. On any
    failure the temporary file is removed and nothing is left at ``dest``; the error names
    ``url`` and ``dest``. Leftovers of killed downloads (``dest.*.part`` older than a day) are
    removed.
    """
    dest = Path(dest)
    created = [d for d in [dest.parent, *dest.parent.parents] if not d.exists()]  # removed again on failure
    dest.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_parts(dest)
    fd, tmp = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        req = urllib.request.Request(url, headers={"User-Agent": "graphattn"})
        written = 0
        with urllib.request.urlopen(req, timeout=60) as resp, open(tmp, "wb") as out:
            # http.client's length: Content-Length, or None for a chunked body (which ignores it)
            total = getattr(resp, "length", None)
            if total is None and not getattr(resp, "chunked", False):
                total = int(resp.headers.get("Content-Length") or 0) or None
            with progress_bar(total=total, unit="B", unit_scale=True, desc=f"download {dest.name}",
                      disable=not progress) as bar:
                while True:
                    block = resp.read(1 << 16)
                    if not block:
                        break
                    out.write(block)
                    written += len(block)
                    bar.update(len(block))
        rejected = f"download of {url} rejected, nothing kept at {dest}"
        if total is not None and written != total:
            raise DataFileError(f"{rejected}: incomplete, got {written:,} of {total:,} bytes (the connection "
                                "closed early); try again")
        for kind, want, digest in (("sha256", sha256, sha256sum), ("git blob", git_blob, git_blob_sha1)):
            if want is not None:
                got = digest(tmp)
                if got != want:
                    raise DataFileError(f"{rejected}: {kind} mismatch (expected {want}, got {got}); the "
                                        "download is corrupt or the upstream file changed")
        if check is not None:
            try:
                check(tmp)
            except DataFileError as exc:  # the check names the temporary file, which is removed below
                msg = str(exc).replace(str(tmp), dest.name).replace("; delete it to re-download", "")
                raise DataFileError(f"{rejected}: {msg}") from None
        plain_mode(tmp)  # as a plain write would (mkstemp creates 0600; shared data roots)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        for d in created:  # deepest first; only folders this call made and that stayed empty
            try:
                d.rmdir()
            except OSError:
                break
        raise
    return dest


def find_file(relpaths: Union[str, Sequence[str]], url: Optional[str] = None,
              root: Optional[PathLike] = None, sha256: Optional[str] = None,
              check: Optional[Callable[[Path], None]] = None, download: bool = True,
              git_blob: Optional[str] = None) -> Path:
    """Return the first of ``relpaths`` (relative to the data root) that exists, else download.

    ``relpaths`` lists accepted local names (e.g. ``tox21/tox21.csv.gz`` and
    ``tox21/tox21.csv``); the download is written to the first one. ``check`` is run on
    local files too, so a truncated local copy fails with a clear message; ``sha256`` /
    ``git_blob`` check downloads only (local copies may be recompressed or edited).
    """
    if isinstance(relpaths, str):
        relpaths = [relpaths]
    base = data_root(root)
    for rel in relpaths:
        path = base / rel
        if path.is_file():
            if path.stat().st_size == 0:
                raise DataFileError(f"{path} is empty; delete it to re-download")
            if check is not None:
                check(path)
            return path
    if url is None or not download:
        why = ("no download is available for it" if url is None else
               f"downloads are disabled (download=False); it can be fetched from {url}")
        raise DataFileError(
            f"none of {list(relpaths)} found under data root {base} (set root= (Python), --data-root (command line) or $GRAPHATTN_DATA), and {why}")
    try:
        return download_url(url, base / relpaths[0], sha256=sha256, check=check, git_blob=git_blob)
    except DataFileError:
        raise
    except OSError as exc:  # URLError is an OSError
        raise DataFileError(
            f"{relpaths[0]} is not under {base} and downloading {url} failed: {exc}. "
            "Put the file there by hand or point root= (Python), --data-root (command line) or $GRAPHATTN_DATA at a copy.") from exc


def writable_dir(base: Path, rel: str) -> Path:
    """``base / rel``, or ``~/.cache/graphattn / rel`` when that cannot be written."""
    path = Path(base) / rel
    try:
        path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    fallback = Path.home() / ".cache" / "graphattn" / rel
    try:
        fallback.mkdir(parents=True, exist_ok=True)
        if fallback == path or not os.access(fallback, os.W_OK):
            raise PermissionError(13, "not writable")
    except OSError as exc:
        raise DataFileError(f"neither the cache folder {path} nor {fallback} can be written ({exc.strerror or exc}): "
                            "point GRAPHATTN_CACHE (or cache_dir=) at a writable folder") from exc
    if fallback != path:
        warnings.warn(f"cache folder {path} is not writable; processing into {fallback} instead "
                      "(set GRAPHATTN_CACHE or cache_dir= to choose)", stacklevel=3)
    return fallback


#: the progress lines PyG's dataset classes print on stderr while they download and process
_PYG_LINES = ("Processing...", "Done!", "Downloading ", "Extracting ")
logger = logging.getLogger("graphattn")


class _PygLineFilter(io.TextIOBase):
    """A stderr that sends PyG's progress lines (:data:`_PYG_LINES`) to the ``graphattn`` logger at
    INFO level and writes everything else (warnings, tqdm bars) through unchanged."""

    def __init__(self, stream):
        self._stream, self._held = stream, ""

    def write(self, text: str) -> int:
        self._held += text
        while self._held:
            line, nl, rest = self._held.partition("\n")
            if any(line.startswith(p) for p in _PYG_LINES):
                if not nl:  # the rest of the line is still to come (print writes the newline apart)
                    break
                logger.info(line)
                self._held = rest
            elif not nl and any(p.startswith(line) for p in _PYG_LINES):
                break  # a prefix of a PyG line: wait for more
            else:
                self._stream.write(line + nl)
                self._held = rest
        return len(text)

    def flush(self) -> None:
        self._stream.flush()


@contextlib.contextmanager
def pyg_progress_to_log():
    """Inside the block, PyG's "Processing..." / "Done!" / "Downloading ..." lines go to the ``graphattn``
    logger (shown with ``logging.basicConfig(level=logging.INFO)``) instead of stderr, where a command
    line tool's output and error messages are."""
    filtered = _PygLineFilter(sys.stderr)
    with contextlib.redirect_stderr(filtered):
        try:
            yield
        finally:
            if filtered._held:  # an unfinished line: let it out as it is
                filtered._stream.write(filtered._held)
