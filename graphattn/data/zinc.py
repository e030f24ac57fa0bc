"""ZINC-12k, the Benchmarking-GNNs subset of ZINC (Dwivedi et al., 2020; PyG's ``ZINC(subset=True)``):
its official target (:func:`zinc_target`) and the builder of ``<data root>/zinc_subset/zinc_subset.csv.gz``
(:func:`build_zinc_subset`) from the canonical public files (:data:`ZINC_SOURCES`).

The target ``logP_SA_cycle_normalized`` is JT-VAE's (Jin et al., 2018, ``bo/gen_latent.py``): the sum of
three z-scores over the 250k ZINC molecules,

.. math::
    y = z(\\mathrm{logP}) + z(-\\mathrm{SA}) + z(-\\mathrm{cycle}), \\qquad
    \\mathrm{cycle} = \\max(0, \\text{largest ring of the cycle basis} - 6),

with Crippen's logP (RDKit ``MolLogP``), Ertl's SA score (RDKit Contrib ``SA_Score``) and the cycle basis
that ``networkx.cycle_basis(nx.Graph(rdmolops.GetAdjacencyMatrix(mol)))`` returns (networkx 3). PyG's
docstring (``logP - SAS - cycles``, cycles = the number of rings of more than six atoms) is wrong on both
counts. RDKit is imported lazily; networkx is not needed.
"""
from __future__ import annotations

import csv
import functools
import gzip
import importlib.util
import io
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from graphattn.utils.progress import progress_bar

from graphattn.data.download import DataFileError, data_root, download_url, find_file
from graphattn.utils.files import plain_mode

__all__ = ["ZINC_FOLDER", "ZINC_FILE", "ZINC_TASK", "ZINC_STATS", "ZincSource", "ZINC_SOURCES", "zinc_target",
           "largest_basis_cycle", "read_smiles_lines", "read_index", "build_zinc_subset"]

ZINC_FOLDER = "zinc_subset"  # under the data root
ZINC_FILE = "zinc_subset.csv.gz"  # header smiles,logP_SA_cycle_normalized,split
ZINC_TASK = "logP_SA_cycle_normalized"

#: (mean, std) over the 250k ZINC molecules of logP, -SA and -cycle: the full-precision values
#: (GCPN's code; 2.45710/1.43432, -3.05258/0.83352, -0.04857/0.28602 to five decimals)
ZINC_STATS = {"logP": (2.4570953396190123, 1.434324401111988), "SA": (-3.0525811293166134, 0.8335207024513095),
              "cycle": (-0.0485696876403053, 0.2860212110245455)}

_JTVAE = "https://raw.githubusercontent.com/wengong-jin/icml18-jtnn/master/data/zinc/"
_BGNN = "https://raw.githubusercontent.com/graphdeeplearning/benchmarking-gnns/master/data/molecules/"


@dataclass(frozen=True)
class ZincSource:
    """One canonical file the ZINC-12k CSV is built from.

    Args:
        names: accepted names under ``<data root>/zinc_subset/`` (plain or gzipped); a download is
            written to the first.
        url: the upstream file.
        count: the SMILES lines (JT-VAE's files) or molecule ids (Benchmarking-GNNs' ``.index``
            files) it holds.
        git_blob: the upstream file's git blob id, checked on download (None: not known).
    """

    names: Tuple[str, ...]
    url: str
    count: int
    git_blob: Optional[str] = None

    @property
    def is_index(self) -> bool:
        return self.names[0].endswith(".index")


def _smiles_source(stem: str, count: int, blob: Optional[str]) -> ZincSource:
    names = (f"{stem}.txt", f"{stem}.txt.gz", f"jtvae_{stem}.txt", f"jtvae_{stem}.txt.gz")
    return ZincSource(names, _JTVAE + f"{stem}.txt", count, blob)


#: per part, its (SMILES file, index file): the part is ``smiles[index]``, in index order. JT-VAE's
#: ``train/valid/test.txt`` are ZINC-full's parts in the order of Benchmarking-GNNs' pickles.
ZINC_SOURCES: Dict[str, Tuple[ZincSource, ZincSource]] = {
    "train": (_smiles_source("train", 220_011, None),
              ZincSource(("train.index",), _BGNN + "train.index", 10_000, "c4b804d9cdf36d42d0c98149a412dfa01d49b9f4")),
    "val": (_smiles_source("valid", 24_445, "b6c51cb245602f46f7a5ccf6003d5d4d3f6a96fc"),
            ZincSource(("val.index",), _BGNN + "val.index", 1_000, "78db245ba10348d0f677a8ea72ced7daea3bc35e")),
    "test": (_smiles_source("test", 5_000, "7dc73bee7f7889c2de7fd5836938a1bcfba66b4f"),
             ZincSource(("test.index",), _BGNN + "test.index", 1_000, "428bc2610e8c288b5460150ae36117acb403e0e4")),
}


@functools.lru_cache(maxsize=1)
def _sascorer():
    """RDKit's Contrib ``sascorer`` module (Ertl & Schuffenhauer, 2009), loaded from its file."""
    from rdkit import RDConfig  # optional dependency: `import graphattn` works without RDKit

    path = Path(RDConfig.RDContribDir) / "SA_Score" / "sascorer.py"
    if not path.is_file():
        raise ImportError(f"RDKit's SA score is not installed ({path} is missing): this RDKit build does not ship "
                          "Contrib/SA_Score; install the PyPI wheel (pip install rdkit), which does")
    spec = importlib.util.spec_from_file_location("sascorer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def largest_basis_cycle(mol) -> int:
    """Atoms in the largest cycle of ``networkx.cycle_basis(nx.Graph(GetAdjacencyMatrix(mol)))``
    (networkx 3: one depth-first walk per component from its highest-numbered atom, neighbours in
    atom order), 0 for an acyclic molecule. A cycle basis is not unique: for some fused and bridged
    ring systems this is larger than the largest ring of RDKit's SSSR, as JT-VAE's target has it."""
    neighbors = [sorted(n.GetIdx() for n in atom.GetNeighbors()) for atom in mol.GetAtoms()]
    left, largest = dict.fromkeys(range(len(neighbors))), 0
    while left:  # one component per pass
        root = left.popitem()[0]
        stack, pred, used = [root], {root: root}, {root: set()}
        while stack:
            z = stack.pop()
            for nbr in neighbors[z]:
                if nbr not in used:  # a new atom: a tree edge
                    pred[nbr], used[nbr] = z, {z}
                    stack.append(nbr)
                elif nbr not in used[z]:  # a non-tree edge closes the cycle nbr, z, pred[z], ...
                    size, p = 3, pred[z]
                    while p not in used[nbr]:
                        size, p = size + 1, pred[p]
                    largest = max(largest, size)
                    used[nbr].add(z)
        for node in pred:
            left.pop(node, None)
    return largest


def zinc_target(smiles_or_mol) -> float:
    """ZINC's ``logP_SA_cycle_normalized`` of a molecule (SMILES or RDKit ``Mol``): z(logP) + z(-SA)
    + z(-cycle) with the 250k-ZINC statistics :data:`ZINC_STATS` (see the module doc).

    >>> round(zinc_target("CCN(Cc1ccc(OC)c(OC)c1)C(=O)c1ccsc1"), 4)  # the first ZINC-full val molecule
    2.1017
    """
    from rdkit import Chem  # optional dependency: `import graphattn` works without RDKit
    from rdkit.Chem import Descriptors

    mol = Chem.MolFromSmiles(smiles_or_mol) if isinstance(smiles_or_mol, str) else smiles_or_mol
    if mol is None or mol.GetNumAtoms() == 0:
        raise ValueError(f"zinc_target: RDKit cannot read the molecule {smiles_or_mol!r}")
    terms = {"logP": Descriptors.MolLogP(mol), "SA": -_sascorer().calculateScore(mol),
             "cycle": -max(0, largest_basis_cycle(mol) - 6)}
    return sum((v - ZINC_STATS[k][0]) / ZINC_STATS[k][1] for k, v in terms.items())


def read_smiles_lines(path) -> List[str]:
    """The SMILES of a JT-VAE file (one per line, plain or gzipped), in file order."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return [line.split()[0] for line in data.decode("utf-8").splitlines() if line.strip()]


def read_index(path) -> List[int]:
    """The molecule ids of a Benchmarking-GNNs ``.index`` file (comma-separated, one line), in file order."""
    fields = [f for f in re.split(r"[,\s]+", Path(path).read_text()) if f]
    if not all(f.isdigit() for f in fields):
        raise DataFileError(f"{path}: not a Benchmarking-GNNs index file (comma-separated molecule ids)")
    return [int(f) for f in fields]


def _check_source(src: ZincSource):
    def check(path: Path) -> None:
        n = len(read_index(path) if src.is_index else read_smiles_lines(path))
        if n != src.count:
            what = "molecule ids" if src.is_index else "SMILES lines"
            raise DataFileError(f"{path}: {n:,} {what}, expected {src.count:,} (the file is truncated or not "
                                f"{src.url}); delete it to re-download")
    return check


def _source_file(src: ZincSource, root, download: bool, progress: bool) -> Path:
    """The local copy of ``src`` under ``<root>/zinc_subset/`` (checked), else its download."""
    base = data_root(root)
    rels = [f"{ZINC_FOLDER}/{n}" for n in src.names]
    if any((base / r).is_file() for r in rels):
        return find_file(rels, root=base, check=_check_source(src))
    dest = base / rels[0]
    why = "downloads are disabled (download=False)"
    if download:
        try:
            return download_url(src.url, dest, check=_check_source(src), progress=progress, git_blob=src.git_blob)
        except OSError as exc:  # offline, or the folder cannot be written
            why = f"downloading {src.url} failed ({exc})"
    spare = (f", or use a {ZINC_FILE} whose train block is the documented same-source substitute (the shared "
             "data's zinc_subset/, MANIFEST.md)") if src is ZINC_SOURCES["train"][0] else ""
    raise DataFileError(f"{dest.name} ({src.url}, {src.count:,} {'ids' if src.is_index else 'lines'}) is missing and "
                        f"{why}: put it at {dest}{spare}")


def _select(smiles: Sequence[str], ids: Sequence[int], path: Path) -> List[str]:
    bad = [i for i in ids if not 0 <= i < len(smiles)]
    if bad:
        raise DataFileError(f"{path}: {len(bad)} ids beyond its {len(smiles):,} SMILES (first {bad[0]}); the "
                            "index and SMILES files do not belong together")
    return [smiles[i] for i in ids]


def _write_rows(dest: Path, rows: Sequence[Tuple[str, str, str]]) -> None:
    """``rows`` as the gzipped CSV ``dest``, written to a temporary file and renamed into place."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["smiles", ZINC_TASK, "split"])
    writer.writerows(rows)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    except OSError as exc:
        raise DataFileError(f"cannot write {dest} ({exc.strerror or exc}): point root= (Python), --data-root "
                            "(command line) or $GRAPHATTN_DATA at a writable folder") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(gzip.compress(buf.getvalue().encode(), mtime=0))
        plain_mode(tmp)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_zinc_subset(root=None, download: bool = True, progress: bool = True) -> Path:
    """Build ``<data root>/zinc_subset/zinc_subset.csv.gz`` unless it exists, and return its path.

    Each part is ``smiles[index]`` of :data:`ZINC_SOURCES` (train = JT-VAE ``train.txt`` at
    ``train.index``, val = ``valid.txt`` at ``val.index``, test = ``test.txt`` at ``test.index``, in
    index order), scored with :func:`zinc_target` (tqdm bar) and written atomically with the header
    ``smiles,logP_SA_cycle_normalized,split`` (targets to six decimals). Each file is read from
    ``<data root>/zinc_subset/`` (``valid.txt`` also as ``jtvae_valid.txt.gz``, ...), else
    downloaded (tqdm bar, git blob checked where known), and its line / id count checked.

    Args:
        root: the data root (default: :func:`~graphattn.data.download.data_root`).
        download: allow downloading the files that are not there.
        progress: show the download and scoring bars.

    Raises :class:`DataFileError` naming the first file that is missing (``train.txt`` when
    offline: no train part is ever made up), truncated or wrong.
    """
    dest = data_root(root) / ZINC_FOLDER / ZINC_FILE
    if dest.is_file():
        return dest
    paths = {part: [_source_file(s, root, download, progress) for s in pair] for part, pair in ZINC_SOURCES.items()}
    picked = [(smiles, part) for part, (smiles_path, index_path) in paths.items()
              for smiles in _select(read_smiles_lines(smiles_path), read_index(index_path), index_path)]
    rows = [(s, f"{zinc_target(s):.6f}", part) for s, part in progress_bar(picked, desc=f"score {ZINC_FILE}",
                                                                  disable=not progress)]
    _write_rows(dest, rows)
    return dest
