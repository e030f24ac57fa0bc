"""Public functions and modules used on their own get clear errors, as the models do."""
import pytest
import torch
from torch_geometric.data import Data

from graphattn import (AddRandomWalkPE, GraphClassifier, GraphSelfAttention, LapPEEncoder, dense_attention,
                       edge_attention)


def test_dense_reference_checks_its_inputs():
    torch.manual_seed(0)
    q = k = v = torch.randn(1, 2, 4, 3)
    mask = torch.rand(1, 4, 4) < 0.5
    for bad in (mask.float(), mask.long()):
        with pytest.raises(TypeError, match="mask must be a bool tensor"):
            dense_attention(q, k, v, bad)
    with pytest.raises(ValueError, match=r"mask must have shape \(1, 4, 4\)"):
        dense_attention(q, k, v, mask[:, :3])
    with pytest.raises(ValueError, match="q contains NaN"):
        dense_attention(q * float("nan"), k, v, mask)
    with pytest.raises(ValueError, match="q must have shape"):
        dense_attention(q[0], k, v, mask)
    with pytest.raises(ValueError, match="k must have shape"):
        dense_attention(q, k[..., :2], v, mask)
    with pytest.raises(TypeError, match="floating-point"):
        dense_attention(q.long(), k, v, mask)
    assert dense_attention(q, k, v, mask).shape == (1, 2, 4, 3)
    qi = torch.randint(0, 3, (4, 2, 3))  # was "value cannot be converted to type int64_t without overflow"
    with pytest.raises(TypeError, match="q must be a floating-point tensor"):
        edge_attention(qi, qi, qi, torch.tensor([[0], [1]]))


@pytest.mark.parametrize("slope", [float("nan"), float("inf"), "0.2", True, None])
def test_negative_slope_must_be_a_finite_number(slope):
    with pytest.raises(ValueError, match="negative_slope must be a finite number"):
        GraphSelfAttention(4, 2, score="additive", negative_slope=slope)


def test_lap_pe_encoder_on_its_own_names_dtype_and_nan():
    enc = LapPEEncoder(3, 8)
    with pytest.raises(ValueError, match="pe contains NaN"):
        enc(torch.full((5, 3), float("nan")))
    with pytest.raises(ValueError, match="eigvals contains NaN"):
        enc(torch.randn(5, 3), eigvals=torch.full((5, 3), float("nan")))
    with pytest.raises(TypeError, match="pe has dtype torch.float64"):
        enc(torch.randn(5, 3, dtype=torch.float64))
    mask = torch.ones(5, 3, dtype=torch.bool)
    mask[:, 2] = False  # padded columns may hold NaN (AddLaplacianPE on small graphs)
    pe, ev = torch.randn(5, 3), torch.rand(5, 3)
    pe[:, 2] = ev[:, 2] = float("nan")
    assert torch.isfinite(enc(pe, eigvals=ev, mask=mask)).all()


def test_shape_errors_name_the_shape_the_user_passed():
    m = GraphClassifier(3, 8, 2, num_layers=1, heads=2, edge_dim=2)
    x, ei = torch.randn(5, 3), torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"x must have 3 columns, got shape \(5,\)"):
        m(x[:, 0], ei)
    with pytest.raises(ValueError, match=r"edge_attr must have 2 columns, got shape \(2,\)"):
        m(x, ei, edge_attr=torch.ones(2))


@pytest.mark.parametrize("scale,dtype", [(1.0, torch.float64), (1e-40, torch.float64), (1e39, torch.float64),
                                         (2e38, torch.float32)])
def test_random_walk_pe_ignores_the_weights_scale(scale, dtype):
    # P = D^-1 A does not depend on a common scale: weights beyond float32's range gave NaN or 0
    ei = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]])  # a triangle
    d = Data(edge_index=ei, edge_weight=torch.full((6,), scale, dtype=dtype), num_nodes=3)
    torch.testing.assert_close(AddRandomWalkPE(3)(d).random_walk_pe, torch.tensor([[0.0, 0.5, 0.25]] * 3))
