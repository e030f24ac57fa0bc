"""Tiny hand-written inputs shared by test files in several folders.

A labelled SMILES CSV (40 valid molecules with several scaffolds: ``toxic`` = has Cl,
``active`` = aromatic), the options of a tiny one-epoch molecule model, a graph set in the
DGCNN/GIN text format and a batch of path graphs. Test files import this module by name: pytest puts ``tests/``
(the folder of ``conftest.py``) on ``sys.path``.
"""
import csv
import gzip
from pathlib import Path

import torch

#: ``graphattn train`` options of a tiny molecule model: one epoch, no descriptors, no progress bar
TINY = ["--hidden", "16", "--layers", "1", "--heads", "2", "--pe-dim", "4", "--batch-size", "16",
        "--epochs", "1", "--no-progress", "--no-descriptors"]
#: 40 valid molecules with several scaffolds; ``toxic`` = has Cl, ``active`` = aromatic
SMILES = ["CCO", "CCCl", "c1ccccc1", "Clc1ccccc1", "CC(=O)O", "ClCC(=O)O", "c1ccncc1", "Clc1ccncc1",
          "CCN", "CCCCl", "Cc1ccccc1", "Cc1ccc(Cl)cc1", "C1CCCCC1", "ClC1CCCCC1", "Oc1ccccc1",
          "Oc1ccc(Cl)cc1", "CCCC", "CC(C)Cl", "c1ccc2ccccc2c1", "Clc1ccc2ccccc2c1", "C1CCNCC1",
          "ClC1CCNCC1", "Nc1ccccc1", "Nc1ccc(Cl)cc1", "CCOCC", "ClCCOCC", "c1ccoc1", "Clc1ccoc1",
          "C1CCOC1", "ClC1CCOC1", "O=C(O)c1ccccc1", "O=C(O)c1ccc(Cl)cc1", "CC(C)O", "CC(Cl)CO",
          "c1ccsc1", "Clc1ccsc1", "C1CC1", "ClC1CC1", "CCc1ccccc1", "CCc1ccc(Cl)cc1"]


def molecule_labels(smiles):
    """``(toxic, active)`` of one of :data:`SMILES`: has Cl, is aromatic."""
    return int("Cl" in smiles), int(any(c.islower() for c in smiles.replace("Cl", "")))


def write_csv(path: Path, header, rows) -> Path:
    """A CSV (gzipped when the name ends in ``.gz``), its folder made when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def train_csv(path: Path) -> Path:
    """The 40 molecules of :data:`SMILES` with their ``toxic`` and ``active`` labels."""
    return write_csv(path, ["smiles", "toxic", "active"], [(s, *molecule_labels(s)) for s in SMILES])


def write_tu_text(path: Path, n_graphs: int = 24) -> Path:
    """DGCNN/GIN text format: class 0 = cycles, class 1 = stars (labels 3 and 7, re-mapped)."""
    lines = [str(n_graphs)]
    for k in range(n_graphs):
        n = 5 + k % 4
        star = k % 2 == 1
        lines.append(f"{n} {7 if star else 3}")
        for i in range(n):
            if star:
                nb = list(range(1, n)) if i == 0 else [0]
            else:
                nb = [(i - 1) % n, (i + 1) % n]
            lines.append(" ".join(map(str, [0, len(nb), *nb])))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_file(path: Path, text: str, encoding: str = "utf-8") -> Path:
    """``text`` written to ``path``; the path back, for use in the call that reads it."""
    path.write_text(text, encoding=encoding)
    return path


def path_batch(sizes):
    """Paths of the given sizes (edges both ways) as one batch: ``(edge_index, batch)``."""
    parts, off = [], 0
    for n in sizes:
        r = torch.arange(n - 1)
        parts.append(torch.cat([torch.stack([r, r + 1]), torch.stack([r + 1, r])], 1) + off)
        off += n
    return torch.cat(parts, 1), torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
