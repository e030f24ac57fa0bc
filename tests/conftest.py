"""Shared fixtures."""
from pathlib import Path

import pytest
import torch


@pytest.fixture
def molecule_csv(tmp_path, monkeypatch):
    """The small labelled SMILES CSV, with a private data root and one torch thread (CLI runs)."""
    monkeypatch.setenv("GRAPHATTN_DATA", str(tmp_path / "data"))
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield Path(__file__).parent / "fixtures" / "molecules_tasks_train.csv"
    torch.set_num_threads(n)


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """Featurized data is cached under ``tmp_path`` (``$GRAPHATTN_CACHE``), never in ``~/.cache``."""
    monkeypatch.setenv("GRAPHATTN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
