"""Planetoid citation graphs (Cora, CiteSeer, PubMed) with the public split, from the raw
``ind.<name>.*`` files via PyG.

The raw files are read from the data root (downloaded from kimiyoung/planetoid when
absent); PyG's processed file goes to :func:`~graphattn.data.download.cache_root`, so the
data root is never written to.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import re
import shutil
import tempfile
import warnings
import zlib
from pathlib import Path
from typing import Dict, Optional

import torch
from torch_geometric.data import Data
from torch_geometric.datasets import Planetoid

from graphattn.data.download import DataFileError, PathLike, cache_root, find_file, pyg_progress_to_log
from graphattn.utils.files import plain_mode

__all__ = ["load_cora", "load_planetoid", "PLANETOID_DATASETS"]

_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
_PLANETOID_URL = "https://github.com/kimiyoung/planetoid/raw/master/data"
#: name -> (PyG's name, expected (nodes, directed edges, features, classes))
PLANETOID_DATASETS = {"cora": ("Cora", (2708, 10556, 1433, 7)),
                      "citeseer": ("CiteSeer", (3327, 9104, 3703, 6)),
                      "pubmed": ("PubMed", (19717, 88648, 500, 3))}
#: sha256 of the upstream files (verified on the shared data's copies): downloads must match
_SHA256 = {"ind.cora.x": "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
           "ind.cora.tx": "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
           "ind.cora.allx": "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
           "ind.cora.y": "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
           "ind.cora.ty": "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
           "ind.cora.ally": "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
           "ind.cora.graph": "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
           "ind.cora.test.index": "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875"}


def _raw_check(path: Path) -> None:
    """A Planetoid raw file reads as PyG reads it (pickles of numpy/scipy objects; the test
    index one integer per line): an HTML error page or a cut download is a clear error, not
    an ``UnpicklingError`` from inside PyG on every later run."""
    name = re.sub(r"\.[^.]+\.part$", "", path.name)  # a download is checked as NAME.<random>.part
    if name.endswith(".test.index"):
        try:
            [int(v) for v in path.read_text().split()]
        except (ValueError, UnicodeDecodeError) as exc:
            raise DataFileError(f"{path}: not a Planetoid test index (one node id per line): {exc}; "
                                "delete it to re-download") from None
        return
    try:
        with open(path, "rb") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # scipy's old pickled module paths
            pickle.load(f, encoding="latin1")  # as PyG's read_planetoid_data
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError, IndexError,
            KeyError, zlib.error) as exc:
        raise DataFileError(f"{path}: not a Planetoid pickle, or cut short ({type(exc).__name__}: {exc}); "
                            "delete it to re-download") from None


def load_planetoid(name: str, root: Optional[PathLike] = None, *, download: bool = True) -> Data:
    """A Planetoid citation graph (``cora``, ``citeseer``, ``pubmed``) with the public split
    (20 training nodes per class, 500 validation, 1,000 test), read by PyG's ``Planetoid`` from
    the raw ``ind.<name>.*`` files.

    The eight raw files are looked up under ``<root>/<name>/``, PyG's ``<root>/<PyGName>/raw/``
    or ``<root>`` itself, and downloaded from kimiyoung/planetoid when absent. They are
    symlinked (copied where links are not possible) into ``$GRAPHATTN_CACHE`` (default
    ``~/.cache/graphattn``) ``/planetoid/<hash>/<PyGName>/raw`` where PyG writes its processed
    file; the data root is never written to when the files are present. Counts (checked, a
    warning when they differ): Cora 2,708 nodes / 10,556 directed edges / 1,433 features / 7
    classes; CiteSeer 3,327 / 9,104 / 3,703 / 6 (PyG keeps its 15 isolated test-index gaps as
    featureless nodes; their label is -1, unlabelled, in no mask); PubMed 19,717 / 88,648 / 500 / 3.
    """
    key = name.lower()
    if key not in PLANETOID_DATASETS:
        raise KeyError(f"unknown Planetoid dataset {name!r}; known: {', '.join(PLANETOID_DATASETS)}")
    pyg_name, expected = PLANETOID_DATASETS[key]
    raw = {}
    for suf in _SUFFIXES:
        fn = f"ind.{key}.{suf}"
        raw[fn] = find_file([f"{key}/{fn}", f"{pyg_name}/raw/{fn}", f"{key}/raw/{fn}", fn],
                            url=f"{_PLANETOID_URL}/{fn}", root=root, download=download,
                            sha256=_SHA256.get(fn), check=_raw_check)
    # the processed file is keyed by the raw files' folder, sizes and times: replaced files are re-read
    stamp = [str(raw[f"ind.{key}.x"].resolve().parent)] + [f"{p.stat().st_size}:{p.stat().st_mtime_ns}"
                                                          for p in raw.values()]
    tag = hashlib.sha1("|".join(stamp).encode()).hexdigest()[:12]
    ds = _processed(cache_root() / "planetoid" / tag, pyg_name, raw)
    data = ds[0]
    got = (data.num_nodes, data.edge_index.size(1), data.num_features, ds.num_classes)
    if got != expected:
        warnings.warn(f"{key}: {got[0]} nodes / {got[1]} edges / {got[2]} features / {got[3]} classes, "
                      f"expected {expected} (another release of the files?)", stacklevel=2)
    # CiteSeer's test.index skips ids (isolated nodes): PyG adds them with zero features and an
    # all-zero label row, which argmax reads as class 0; they are in no mask: unlabelled (-1)
    test_index = [int(v) for v in raw[f"ind.{key}.test.index"].read_text().split()]
    if test_index and max(test_index) < data.num_nodes:
        gap = sorted(set(range(min(test_index), max(test_index) + 1)) - set(test_index))
        if gap:
            gap_t = torch.tensor(gap)
            if not bool((data.train_mask | data.val_mask | data.test_mask)[gap_t].any()):
                data.y = data.y.clone()
                data.y[gap_t] = -1
    data.name = key
    data.class_names = [str(i) for i in range(ds.num_classes)]
    data.has_features, data.feature_source = True, "file"
    return data


def _link_raw(proc_root: Path, pyg_name: str, raw: Dict[str, Path]) -> None:
    raw_dir = proc_root / pyg_name / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    for fn, src in raw.items():
        dst = raw_dir / fn
        try:
            dst.symlink_to(src.resolve())
        except OSError:
            shutil.copyfile(src, dst)


def _planetoid(root: Path, pyg_name: str) -> Planetoid:
    """PyG's ``Planetoid`` (public split) on ``root``, its progress lines sent to the log."""
    with pyg_progress_to_log():
        return Planetoid(str(root), pyg_name, split="public")


def _processed(proc_root: Path, pyg_name: str, raw: Dict[str, Path]):
    """PyG's ``Planetoid`` on the cached folder ``proc_root``. PyG writes ``processed/data.pt``
    in place, without a lock: processes starting together read each other's half-written
    file, and a run killed while writing leaves a file that never loads again. So the folder
    is built privately and renamed into place (the first finished process wins), and a cached
    folder that does not load is rebuilt."""
    if proc_root.is_dir():
        try:
            return _planetoid(proc_root, pyg_name)
        except Exception as exc:  # truncated / corrupt processed file (torch.load raises many kinds)
            warnings.warn(f"{proc_root}: the processed cache does not load ({type(exc).__name__}); "
                          "rebuilding it", stacklevel=3)
            shutil.rmtree(proc_root, ignore_errors=True)
    try:
        proc_root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=proc_root.name + ".tmp-", dir=proc_root.parent))
    except OSError as exc:
        raise DataFileError(f"cannot write PyG's processed {pyg_name} under {proc_root.parent} "
                            f"({exc.strerror or exc}): point GRAPHATTN_CACHE at a writable folder") from exc
    try:
        _link_raw(tmp, pyg_name, raw)
        _planetoid(tmp, pyg_name)
        plain_mode(tmp, 0o777)  # mkdtemp makes it 0700: others sharing the cache could not read it
        try:
            os.rename(tmp, proc_root)
        except OSError:  # another process renamed its copy first: use that one
            if not proc_root.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _planetoid(proc_root, pyg_name)


def load_cora(root: Optional[PathLike] = None, *, download: bool = True) -> Data:
    """Cora with the public Planetoid split (:func:`load_planetoid` ``("cora")``): 2,708 nodes,
    10,556 directed edges, 1,433 features, 7 classes, masks 140/500/1000."""
    return load_planetoid("cora", root, download=download)
