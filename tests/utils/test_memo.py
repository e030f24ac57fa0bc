"""Facts remembered per tensor (graphattn.utils.memo): reused for the same unchanged tensor, read
again after an in-place edit, dropped with the tensor, never kept from inference mode."""
import gc

import pytest
import torch

from graphattn.nn.features import FeatureEncoder
from graphattn.nn.global_tokens import GlobalTokens
from graphattn.ops.padding import check_batch, graph_layout
from graphattn.utils import memo
from graphattn.utils.validation import clear_checked_indices


def test_recall_needs_the_same_unchanged_tensors():
    a, b = torch.arange(4), torch.arange(4)
    assert memo.remember("t", 7, a, None) == 7
    assert memo.recall("t", a, None) == 7
    assert memo.recall("t", b, None) is None and memo.recall("t", a, b) is None and memo.recall("u", a, None) is None
    a.add_(1)  # in place: another graph
    assert memo.recall("t", a, None, default="miss") == "miss"


def test_entries_go_with_their_tensor_and_on_clear():
    a = torch.arange(3)
    memo.remember("t", 1, a)
    n = len(memo._MEMO)
    del a
    gc.collect()
    assert len(memo._MEMO) == n - 1
    c = torch.arange(3)
    memo.remember("t", 1, c)
    clear_checked_indices()
    assert memo.recall("t", c) is None


def test_a_value_holding_its_own_key_is_not_remembered():
    a = torch.arange(3)
    assert memo.remember("self", (a, 1), a) == (a, 1) and memo.recall("self", a) is None
    batch = torch.tensor([0, 0, 1])
    lay = graph_layout(batch, 3)
    assert lay.graph is not batch and graph_layout(batch, 3) is lay


def test_tensors_made_in_inference_mode_are_found_only_there():
    a = torch.arange(3)
    with torch.inference_mode():
        memo.remember("flag", True, a)
        made = memo.remember("tensors", (a + 1, a * 2), a)
        assert memo.recall("tensors", a) is made
        inf = torch.arange(3)
        memo.remember("flag", True, inf)  # an inference tensor: no version counter, not keyed
    assert memo.recall("flag", a) is True and memo.recall("tensors", a) is None
    assert memo.recall("flag", inf) is None
    normal = memo.remember("tensors", (a + 2,), a)
    with torch.inference_mode():
        assert memo.recall("tensors", a) is normal  # tensors made outside are fine inside


def test_check_batch_reads_a_batch_once_and_again_after_an_edit():
    batch = torch.tensor([0, 0, 1, 2])
    assert check_batch(batch, 4) == 3 and check_batch(batch, 4, 5) == 5
    with pytest.raises(ValueError, match="num_graphs=2 but batch holds graph id 2"):
        check_batch(batch, 4, 2)  # the remembered largest id still checks num_graphs
    batch[1] = -1
    with pytest.raises(ValueError, match="negative graph ids"):
        check_batch(batch, 4)


def test_graph_layout_is_built_once_per_batch():
    batch = torch.tensor([1, 0, 1, 1])
    lay = graph_layout(batch, 4)
    assert graph_layout(batch, 4) is lay and (lay.B, lay.L) == (2, 3)
    assert graph_layout(batch, 4, 3) is not lay  # another number of graphs: another layout
    batch[0] = 0
    assert graph_layout(batch, 4) is not lay and graph_layout(batch, 4).L == 2


def test_token_graph_is_reused_for_the_same_graph_and_rebuilt_after_an_edit():
    tokens = GlobalTokens(4, num_tokens=2)
    x, ei, batch = torch.randn(5, 4), torch.tensor([[0, 1, 3], [1, 2, 4]]), torch.tensor([0, 0, 0, 1, 1])
    first = tokens(x, ei, batch)
    again = tokens(x, ei, batch)
    assert again.edge_index is first.edge_index and again.batch is first.batch
    ei[1, 0] = 2  # in place
    edited = tokens(x, ei, batch)
    assert edited.edge_index is not first.edge_index and edited.edge_index[1, 0] == 2
    fresh = GlobalTokens(4, num_tokens=2)(x, ei.clone(), batch.clone())
    assert torch.equal(fresh.edge_index, edited.edge_index) and torch.equal(fresh.batch, edited.batch)
    edited.edge_index[0, 0] = 4  # the caller edits what it was handed: not handed out again
    rebuilt = tokens(x, ei, batch)
    assert rebuilt.edge_index is not edited.edge_index and torch.equal(rebuilt.edge_index, fresh.edge_index)


def test_distinct_rows_are_computed_once_per_tensor():
    enc = FeatureEncoder(2, 4, vocab_sizes=[3, 5])
    codes = torch.tensor([[0, 1], [2, 4], [0, 1]])
    rows, index = enc.unique_rows(codes)
    assert enc.unique_rows(codes)[1] is index
    codes[2] = torch.tensor([1, 3])
    rows, index = enc.unique_rows(codes)
    assert torch.equal(rows[index], codes)
    codes[0, 1] = 9  # out of its vocabulary: the edit is seen, the check runs again
    with pytest.raises(ValueError, match="column 1 has values outside"):
        enc.unique_rows(codes)
