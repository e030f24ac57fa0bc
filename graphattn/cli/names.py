"""The dataset names ``graphattn train NAME`` accepts, without importing torch: a misspelt name is
answered at once, with the closest names (``train corra`` → did you mean cora?). The lists equal the
registries (``graphattn.data.MOLECULENET``, the social tables and their aliases); tests/cli/test_names.py
checks that they stay equal."""
from __future__ import annotations

import difflib
from typing import List, Optional

__all__ = ["MOLECULE_NAMES", "SOCIAL_NAMES", "SOCIAL_ALIASES", "check_dataset_name", "close_names"]

MOLECULE_NAMES = ("bace", "bbbp", "clintox", "esol", "freesolv", "hiv", "lipophilicity", "sider", "tox21", "toxcast",
                  "zinc")
SOCIAL_NAMES = ("citeseer", "collab", "cora", "deezer-ego", "deezer_europe", "facebook", "github", "imdb-binary",
                "imdb-multi", "karate", "lastfm_asia", "mutag", "nci1", "ptc", "pubmed", "reddit-binary",
                "reddit-threads", "twitch-de", "twitch-engb", "twitch-es", "twitch-fr", "twitch-ptbr", "twitch-ru",
                "twitch-tw")
SOCIAL_ALIASES = ("deezer", "deezer-egos", "deezer-europe", "deezer_ego_nets", "deezer_egos", "facebook_page_page",
                  "git", "github_developers", "imdb", "imdb_binary", "imdb_multi", "imdbbinary", "imdbmulti",
                  "karate_club", "karateclub", "lastfm", "lastfm-asia", "reddit", "reddit10k", "reddit_binary",
                  "reddit_threads", "reddit_threads_10k", "redditbinary", "twitch-en", "twitch-pt")


def _norm(name: str) -> str:  # as the social loaders match names: "LastFM Asia" is lastfm_asia
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def close_names(name: str, n: int = 3) -> List[str]:
    """Up to ``n`` known dataset names closest to ``name``."""
    known = [*MOLECULE_NAMES, *SOCIAL_NAMES]
    by_norm = {_norm(k): k for k in known}
    return [by_norm[m] for m in difflib.get_close_matches(_norm(name), list(by_norm), n=n, cutoff=0.6)]


def check_dataset_name(name: Optional[str], files: bool = True) -> None:
    """``ValueError`` for a name ``train`` (or ``download``) does not know, suggesting the closest ones
    (``None``: nothing to check, the inputs are files; ``files``: mention the file options)."""
    if name is None:
        return
    accepted = {_norm(k) for k in (*MOLECULE_NAMES, *SOCIAL_NAMES, *SOCIAL_ALIASES)}
    if _norm(name) in accepted:
        return
    close = close_names(name)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    raise ValueError(f"unknown dataset {name!r}{hint}; choose one of {', '.join([*MOLECULE_NAMES, *SOCIAL_NAMES])}"
                     + (" or give --csv FILE, --edges E --target T, or --tu-text FILE" if files else ""))
