"""Cora with the public Planetoid split, from the raw ``ind.cora.*`` files via PyG.

The raw files are read from the data root (downloaded from kimiyoung/planetoid when
absent); PyG's processed file goes to :func:`~graphattn.data.download.cache_root`, so the
data root is never written to.
"""
from __future__ import annotations

import hashlib
import shutil
from typing import Optional

from torch_geometric.data import Data

from .download import PathLike, cache_root, find_file

__all__ = ["load_cora"]

_CORA_SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
_PLANETOID_URL = "https://github.com/kimiyoung/planetoid/raw/master/data"


def load_cora(root: Optional[PathLike] = None, *, download: bool = True) -> Data:
    """Cora with the public Planetoid split, read by PyG's ``Planetoid`` from raw ``ind.cora.*``.

    The eight raw files are looked up under ``<root>/cora/`` (or ``<root>/Cora/raw/``) and
    downloaded from kimiyoung/planetoid when absent. They are symlinked (copied where links
    are not possible) into ``$GRAPHATTN_CACHE`` (default ``~/.cache/graphattn``)
    ``/planetoid/<hash>/Cora/raw`` where PyG writes its processed file; the data root is
    never written to when the files are present. 2,708 nodes, 10,556 directed edges,
    1,433 features, 7 classes, masks 140/500/1000.
    """
    from torch_geometric.datasets import Planetoid

    raw = {}
    for suf in _CORA_SUFFIXES:
        fn = f"ind.cora.{suf}"
        raw[fn] = find_file([f"cora/{fn}", f"Cora/raw/{fn}"], url=f"{_PLANETOID_URL}/{fn}",
                            root=root, download=download)
    tag = hashlib.sha1(str(raw["ind.cora.x"].resolve().parent).encode()).hexdigest()[:12]
    proc_root = cache_root() / "planetoid" / tag
    raw_dir = proc_root / "Cora" / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    for fn, src in raw.items():
        dst = raw_dir / fn
        if dst.is_symlink() or dst.exists():
            if dst.resolve() == src.resolve() or (not dst.is_symlink()
                                                  and dst.stat().st_size == src.stat().st_size):
                continue
            dst.unlink()
        try:
            dst.symlink_to(src.resolve())
        except OSError:
            shutil.copyfile(src, dst)
    ds = Planetoid(str(proc_root), "Cora", split="public")
    data = ds[0]
    data.name = "cora"
    data.class_names = [str(i) for i in range(ds.num_classes)]
    data.has_features, data.feature_source = True, "file"
    return data
