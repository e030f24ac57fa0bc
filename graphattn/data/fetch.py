"""``graphattn download NAME ...``: fetch named datasets into a data folder with the loaders' own
downloads (canonical URLs, progress bars, structural checks), so that a folder for the tests or a first
look can be made anywhere. A file already there is checked and kept."""
from __future__ import annotations

from typing import Optional

from graphattn.data.download import PathLike, data_root
from graphattn.data.moleculenet import MOLECULENET, moleculenet_file
from graphattn.data.planetoid import PLANETOID_DATASETS, load_planetoid
from graphattn.data.rawio import canonical_name
from graphattn.data.social import SOCIAL_NODE_ALIASES, SOCIAL_NODE_DATASETS, load_social_node_dataset
from graphattn.data.tu import SOCIAL_GRAPH_ALIASES, SOCIAL_GRAPH_DATASETS, load_social_graph_dataset

__all__ = ["fetch_dataset"]


def fetch_dataset(name: str, root: Optional[PathLike] = None) -> str:
    """Download (or find and check) the files of the named dataset under ``root`` (default: the data
    root, :func:`graphattn.data.data_root`); a one-line description of what is there. ``KeyError`` for a
    name no loader knows."""
    base = data_root(root)
    key = name.lower()
    if key in MOLECULENET:
        path = moleculenet_file(key, root)
        return f"{key}: {path}"
    if key in PLANETOID_DATASETS:
        data = load_planetoid(key, root)
        return f"{key}: {data.num_nodes:,} nodes, files under {base / key}"
    node = canonical_name(name, SOCIAL_NODE_ALIASES, tuple(SOCIAL_NODE_DATASETS))
    if node == "karate":
        return "karate: built in (networkx's copy of Zachary's club), nothing to download"
    if node in SOCIAL_NODE_DATASETS:
        data = load_social_node_dataset(node, root)
        return f"{node}: {data.num_nodes:,} nodes, {data.edge_index.size(1) // 2:,} edges, files under {base}"
    graph = canonical_name(name, SOCIAL_GRAPH_ALIASES, tuple(SOCIAL_GRAPH_DATASETS))
    if graph in SOCIAL_GRAPH_DATASETS:
        graphs = load_social_graph_dataset(graph, root)
        return f"{graph}: {len(graphs):,} graphs, files under {base / SOCIAL_GRAPH_DATASETS[graph][0]}"
    raise KeyError(f"unknown dataset {name!r}")

