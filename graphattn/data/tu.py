"""Graph-level social (and small molecular) datasets by name, and PyG's ``TUDataset``.

:func:`load_social_graph_dataset` finds (or downloads) a published graph-classification
set and reads it with the format readers of this package:

* DGCNN/GIN text format (IMDB, REDDIT-BINARY, COLLAB, MUTAG, PTC, NCI1):
  :func:`~graphattn.data.tu_text.load_tu_text`, with the ``10fold_idx`` files read by
  :func:`~graphattn.data.social_splits.load_tu_folds`;
* Karate Club ego-net JSON (Deezer ego-nets, Reddit threads):
  :func:`~graphattn.data.ego_json.load_ego_json`, folds from :func:`stratified_folds`.

Social graphs have no node features: :func:`add_structural_features` adds degree features
and random-walk PE. Users with the TU original format (``NAME_A.txt``,
``NAME_graph_indicator.txt``...) read any folder of them with :func:`load_tu_folder` (the
named sets accept those files too), or get PyG's ``TUDataset`` from :func:`load_tu_dataset`.
The readers are re-exported here.
"""
from __future__ import annotations

import shutil
import warnings
import zipfile
from pathlib import Path
from typing import Optional, Tuple

from torch_geometric.datasets import TUDataset

from graphattn.data.download import DataFileError, PathLike, data_root, find_file, pyg_progress_to_log
from graphattn.data.ego_json import load_ego_json
from graphattn.data.rawio import canonical_name, zip_check
from graphattn.data.social_splits import load_tu_folds, stratified_folds
from graphattn.data.structural import add_structural_features
from graphattn.data.tu_folder import find_tu_prefix, load_tu_folder
from graphattn.data.tu_text import GraphList, load_tu_text

__all__ = [
    "GraphList", "load_tu_text", "load_tu_folder", "load_tu_folds", "stratified_folds", "load_ego_json",
    "load_social_graph_dataset", "load_tu_dataset", "add_structural_features",
    "SOCIAL_GRAPH_DATASETS", "SOCIAL_GRAPH_ALIASES",
]

_IHGNN = ("https://raw.githubusercontent.com/yeweiysh/IHGNN/"
          "dcb2c23cdc06f3ed8cc1dd0f0dced9ddd9156bad/data")
_DS = "https://raw.githubusercontent.com/benedekrozemberczki"

#: the TU collection's names of the sets (their original-format files NAME_A.txt ...)
_TU_NAMES = {"imdb-binary": "IMDB-BINARY", "imdb-multi": "IMDB-MULTI", "reddit-binary": "REDDIT-BINARY",
             "collab": "COLLAB", "mutag": "MUTAG", "ptc": "PTC_MR", "nci1": "NCI1"}

#: name -> (folder, file stem, expected (graphs, nodes, undirected edges w/o loops, classes))
SOCIAL_GRAPH_DATASETS = {
    "imdb-binary": ("imdb_binary", "IMDBBINARY", (1000, 19773, 96531, 2)),
    "imdb-multi": ("imdb_multi", "IMDBMULTI", (1500, None, None, 3)),  # TU: ~19.5k / ~98.9k
    "reddit-binary": ("reddit_binary", "REDDIT-BINARY", (2000, 859254, 995508, 2)),
    "collab": ("collab", "COLLAB", (5000, 372474, 12286079, 3)),
    "mutag": ("mutag", "MUTAG", (188, 3371, 3721, 2)),
    "ptc": ("ptc", "PTC", (344, 8792, 8931, 2)),
    "nci1": ("nci1", "NCI1", (4110, 122747, 132753, 2)),
    "deezer-ego": ("deezer_ego_nets", "deezer_egos", (9629, 226213, 628303, 2)),
    "reddit-threads": ("reddit_threads_10k", "reddit10k", (10000, 237390, 247549, 2)),
}
#: other spellings of the graph-set names (upstream folder and file names) -> the name
SOCIAL_GRAPH_ALIASES = {"imdbbinary": "imdb-binary", "imdb_binary": "imdb-binary",
                        "imdbmulti": "imdb-multi", "imdb_multi": "imdb-multi",
                        "redditbinary": "reddit-binary", "reddit_binary": "reddit-binary",
                        "deezer_ego_nets": "deezer-ego", "deezer-egos": "deezer-ego",
                        "deezer_egos": "deezer-ego", "reddit_threads": "reddit-threads",
                        "reddit10k": "reddit-threads", "reddit_threads_10k": "reddit-threads",
                        "imdb": "imdb-binary", "reddit": "reddit-binary"}


def _tu_folder_files(key: str, folder: str, root) -> Optional[Path]:
    """The folder of the set's TU original-format files under the data root, if any:
    ``<folder>/[<TU>/][raw/]`` or PyG's ``<TU>/raw/`` (``TUDataset(root, TU)``'s layout)."""
    tu = _TU_NAMES.get(key)
    if tu is None:
        return None
    base = data_root(root)
    for d in (base / folder, base / folder / tu, base / tu):
        found = find_tu_prefix(d, tu) if d.is_dir() else None
        if found is not None:
            return found[0]
    return None


def _tu_text_files(folder: str, stem: str, root, download: bool) -> Tuple[Path, Optional[Path]]:
    """Locate ``<stem>.txt[.gz]`` and its fold folder; extract/download the IHGNN zip if needed."""
    base = data_root(root)
    for rel in (f"{folder}/{stem}.txt.gz", f"{folder}/{stem}.txt", f"{folder}/{stem}/{stem}.txt",
                f"{folder}/{stem}/{stem}.txt.gz"):
        if (base / rel).is_file():
            txt = base / rel
            break
    else:
        zrel = f"{folder}/{stem}.zip"
        try:
            zpath = find_file([zrel], url=f"{_IHGNN}/{stem}.zip", root=root, download=download,
                              check=zip_check([f"{stem}/{stem}.txt"]))
        except DataFileError as exc:
            tu = next((v for k, v in _TU_NAMES.items() if SOCIAL_GRAPH_DATASETS[k][0] == folder), "NAME")
            raise DataFileError(
                f"no {stem} files under {base}: accepted are the DGCNN/GIN text file {folder}/{stem}.txt[.gz] "
                f"(with {folder}/10fold_idx/), its zip {folder}/{stem}.zip, or the TU original format "
                f"({tu}_A.txt, {tu}_graph_indicator.txt, {tu}_graph_labels.txt) in {folder}/, {folder}/{tu}/[raw/] "
                f"or {tu}/raw/ ({exc})") from exc
        with zipfile.ZipFile(zpath) as zf:
            wanted = [m for m in zf.namelist() if m.startswith(f"{stem}/")
                      and "__MACOSX" not in m and not m.endswith((".DS_Store", "/"))]
            try:
                zf.extractall(zpath.parent, members=wanted)
            except OSError as exc:
                raise DataFileError(f"cannot extract {zpath} into {zpath.parent}: {exc}") from exc
        txt = zpath.parent / stem / f"{stem}.txt"
    for cand in (txt.parent / "10fold_idx", txt.parent / stem / "10fold_idx"):
        if cand.is_dir():
            return txt, cand
    return txt, None


def load_social_graph_dataset(name: str, root: Optional[PathLike] = None, *,
                              download: bool = True, remove_self_loops: bool = True,
                              structural_features: bool = False, source: Optional[str] = None,
                              **feature_kwargs) -> GraphList:
    """A published graph-classification set by name, with its 10 folds in ``.folds``.

    Names: ``imdb-binary``, ``imdb-multi``, ``reddit-binary``, ``collab``, ``mutag``,
    ``ptc``, ``nci1`` (DGCNN/GIN text format, 10-fold files), ``deezer-ego``,
    ``reddit-threads`` (Karate Club JSON; folds from :func:`stratified_folds`, seed 0).
    Files are taken from ``<root>/<folder>/`` (``imdb_binary/IMDBBINARY.txt.gz``...,
    a ``<folder>/<NAME>.zip`` or its extracted ``<folder>/<NAME>/``) and otherwise
    downloaded (the IHGNN zip for the text sets, benedekrozemberczki/datasets or
    karateclub for the JSON ones; pinned commits in ``datasets/social.md``).
    The text sets also accept the TU original format (``<folder>/[<TU name>/][raw/]`` or PyG's
    ``<TU name>/raw/``, read by :func:`load_tu_folder`) when none of GIN's files (text, extracted
    folder, zip) is there; ``source="gin"`` / ``"tu"`` insists on one (``out.source`` says which
    was read; a checkpoint pins it).
    ``structural_features=True`` runs :func:`add_structural_features` (kwargs forwarded).
    """
    if source not in (None, "gin", "tu"):
        raise ValueError(f"source must be None, 'gin' or 'tu', got {source!r}")
    key = canonical_name(name, SOCIAL_GRAPH_ALIASES, tuple(SOCIAL_GRAPH_DATASETS))
    if key not in SOCIAL_GRAPH_DATASETS:
        raise KeyError(f"unknown graph dataset {name!r}; known: {', '.join(SOCIAL_GRAPH_DATASETS)}")
    folder, stem, counts = SOCIAL_GRAPH_DATASETS[key]
    if key == "deezer-ego":
        z = find_file([f"{folder}/deezer_egos.zip"],
                      url=f"{_DS}/datasets/b2243d00403effca7d588715e5daa5b3aca35a0e/"
                          "graph_classification/deezer_egos.zip",
                      root=root, download=download, check=zip_check(["deezer_egos/deezer_target.csv"]),
                      sha256="79ea3c91bcd635a523d402623a4a671493a8dbed6d7a9c68a49995ab3cdaafcc")
        out = load_ego_json(z, "deezer_egos/deezer_target.csv", remove_self_loops=remove_self_loops)
        out.folds = stratified_folds(out.y)
    elif key == "reddit-threads":
        kc = (f"{_DS}/karateclub/6f6fe5e3ca68ebd08cb3ebcad5276603b32a787d/"
              "dataset/graph_level/reddit10k")
        # downloads pinned by their git blob ids (checked on the shared data's copies): a cut or
        # wrong file is refused before it is kept
        g = find_file([f"{folder}/reddit10k_graphs.json", f"{folder}/reddit10k_graphs.json.gz",
                       f"{folder}/graphs.json"], url=f"{kc}/graphs.json", root=root,
                      download=download, git_blob="825fc1de08ac8701e43c0516e1426516e3db8a54")
        t = find_file([f"{folder}/reddit10k_target.csv", f"{folder}/target.csv"],
                      url=f"{kc}/target.csv", root=root, download=download,
                      git_blob="a8b8f4f52e483fb7f58c59b747255168aa9c98de")
        out = load_ego_json(g, t, remove_self_loops=remove_self_loops)
        out.folds = stratified_folds(out.y)
    else:
        # GIN's files (text, extracted zip folder or zip) first: their fold files define the published folds
        gin = any((data_root(root) / folder / f).is_file() for f in (
            f"{stem}.txt.gz", f"{stem}.txt", f"{stem}/{stem}.txt", f"{stem}/{stem}.txt.gz", f"{stem}.zip"))
        tu_dir = (_tu_folder_files(key, folder, root) if source == "tu"
                  else None if gin or source == "gin" else _tu_folder_files(key, folder, root))
        if source == "tu" and tu_dir is None:
            raise DataFileError(f"{key}: asked for the TU original-format files ({_TU_NAMES.get(key, key)}_A.txt "
                                f"...) under {data_root(root)}, none found"
                                + (" (GIN's text files are there)" if gin else ""))
        if tu_dir is not None:
            out = load_tu_folder(tu_dir, _TU_NAMES[key], remove_self_loops=remove_self_loops)
            txt = tu_dir / f"{_TU_NAMES[key]}_A.txt"
            # GIN's fold files index the text file's graph order: used only when put with these files
            fold_dir = tu_dir / "10fold_idx" if (tu_dir / "10fold_idx").is_dir() else None
            out.source = "tu"
        else:
            txt, fold_dir = _tu_text_files(folder, stem, root, download)
            out = load_tu_text(txt, remove_self_loops=remove_self_loops)
            out.source = "gin"
        out.folds = load_tu_folds(fold_dir, num_graphs=len(out)) if fold_dir else None
        if out.folds is None:
            warnings.warn(f"{key}: no 10fold_idx folder next to {txt}; using stratified_folds()",
                          stacklevel=2)
            out.folds = stratified_folds(out.y)
    out.name = key
    if len(out) != counts[0]:
        warnings.warn(f"{key}: {len(out)} graphs, expected {counts[0]} (another release?)",
                      stacklevel=2)
    if structural_features:
        add_structural_features(out, **feature_kwargs)
    return out


def load_tu_dataset(root: PathLike, name: str, **kwargs):
    """The TU original format (``NAME_A.txt``, ``NAME_graph_indicator.txt``,
    ``NAME_graph_labels.txt``[, ``NAME_node_labels.txt``...]) via PyG's ``TUDataset``.

    Expects ``<root>/<name>/raw/<name>_*.txt`` (PyG downloads from the TU server when they
    are absent and a network is available; a failed download is a :class:`DataFileError` and
    leaves no empty folders; files elsewhere: :func:`load_tu_folder`). PyG already re-codes graph labels to 0..C-1.
    Returns the ``TUDataset``; ``list(ds)`` gives the same shape as :func:`load_tu_text`
    (``x`` holds one-hot node labels where the set has them; social sets have none — use
    ``graphs = add_structural_features(list(ds))``: indexing a dataset returns copies, so the
    features must be added to the list).
    """
    raw = Path(root) / name / "raw"
    if find_tu_prefix(raw, name) is None:
        for d in (Path(root) / name, Path(root)):
            if d.is_dir() and find_tu_prefix(d, name) is not None:
                raise DataFileError(
                    f"TUDataset reads {raw}/{name}_A.txt ...; the files are in {d}: move them into {raw}, or "
                    f"read them where they are with graphattn.data.load_tu_folder({str(d)!r}, {name!r})")
    if (raw / f"{name}_A.txt.gz").is_file() and not (raw / f"{name}_A.txt").is_file():
        raise DataFileError(f"{raw}: PyG's TUDataset reads plain .txt files, these are gzipped: gunzip them, or "
                            f"read them as they are with graphattn.data.load_tu_folder({str(raw)!r}, {name!r})")
    made = [p for p in (Path(root), Path(root) / name, raw) if not p.exists()]
    try:
        with pyg_progress_to_log():
            return TUDataset(str(root), name, **kwargs)
    except Exception as exc:  # PyG's download: URLError, aiohttp errors, HTTP 404 for unknown names...
        if find_tu_prefix(raw, name) is not None:
            raise  # the files were there: PyG's own error is about their content
        for p in reversed(made):  # no empty folders left behind by the failed download
            shutil.rmtree(p, ignore_errors=True)
        raise DataFileError(f"no {raw}/{name}_A.txt (with {name}_graph_indicator.txt, {name}_graph_labels.txt) "
                            f"and PyG's download of {name!r} from the TU server failed "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})") from exc
