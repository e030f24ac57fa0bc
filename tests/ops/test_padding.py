"""Batch vectors and the padded per-graph layout (graphattn.ops.padding): graph counts,
trailing empty graphs and the errors for bad batch vectors."""
import pytest
import torch

from graphattn.ops.padding import GraphLayout, check_batch


def test_check_batch_and_layout():
    b = torch.tensor([1, 0, 1])
    assert check_batch(b, 3) == 2 and check_batch(b, 3, 5) == 5 and check_batch(b[:0], 0) == 1
    assert check_batch(b, 3, torch.tensor(4)) == 4
    with pytest.raises(ValueError, match="num_graphs must be an int"):
        check_batch(b, 3, -1)
    with pytest.raises(TypeError, match="integer tensor"):
        check_batch(b.float(), 3)
    with pytest.raises(ValueError, match="negative graph ids"):
        GraphLayout(torch.tensor([0, -1]), 2)
    layout = GraphLayout(b, 3, 4)
    assert layout.sizes.tolist() == [1, 2, 0, 0] and layout.L == 2


def test_graph_layout_unsorted_batch_roundtrip():
    batch = torch.tensor([1, 0, 1, 2, 0, 1])
    lay = GraphLayout(batch, 6)
    assert (lay.B, lay.L) == (3, 3) and lay.pos.tolist() == [0, 0, 1, 0, 1, 2]
    x = torch.arange(6.0)[:, None]
    assert torch.equal(lay.unpad(lay.pad(x)), x) and lay.mask.sum() == 6
