"""The positional-encoding encoders (LapPEEncoder, sinusoidal 1-D/2-D); the transforms that compute
encodings are tested in tests/transforms/test_positional.py."""
import itertools
import math

import pytest
import torch

from graphattn import LapPEEncoder, sinusoidal_pe, sinusoidal_pe_2d


def encoder_inputs(n=6, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(n, k, dtype=torch.bool)
    return torch.randn(n, k, generator=g), torch.rand(n, k, generator=g), mask


def all_sign_outputs(enc, pe, lam, mask):
    enc.eval()
    with torch.no_grad():
        signs = itertools.product([1.0, -1.0], repeat=pe.size(1))
        return [enc(pe * torch.tensor(s), lam, mask) for s in signs]


def test_encoder_flips_signs_only_in_training():
    torch.manual_seed(0)
    enc = LapPEEncoder(3, 5)
    assert repr(enc) == "LapPEEncoder(3, 5, sign_invariant=False)"
    pe, lam, mask = encoder_inputs()
    candidates = all_sign_outputs(enc, pe, lam, mask)
    enc.eval()
    assert torch.equal(enc(pe, lam, mask), enc(pe, lam, mask))
    assert torch.allclose(enc(pe, lam, mask), candidates[0])
    enc.train()
    torch.manual_seed(1)
    outs = [enc(pe, lam, mask).detach() for _ in range(6)]
    for out in outs:  # each training pass is the eval output of some sign pattern
        assert any(torch.allclose(out, c, atol=1e-6) for c in candidates)
    assert any(not torch.allclose(outs[0], o) for o in outs[1:])  # and the pattern changes


def test_encoder_flips_per_graph_with_batch():
    torch.manual_seed(0)
    enc = LapPEEncoder(3, 4)
    pe, lam, mask = encoder_inputs(n=8)
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    candidates = all_sign_outputs(enc, pe, lam, mask)
    enc.train()
    differ = False
    for _ in range(10):
        out = enc(pe, lam, mask, batch).detach()
        ids = [next(i for i, c in enumerate(candidates) if torch.allclose(out[rows], c[rows], atol=1e-6))
               for rows in (slice(0, 4), slice(4, 8))]
        differ |= ids[0] != ids[1]
    assert differ


def test_sign_invariant_encoder():
    torch.manual_seed(0)
    enc = LapPEEncoder(4, 6, hidden_channels=8, sign_invariant=True)
    pe, lam, mask = encoder_inputs(n=5, k=4)
    ref = enc.eval()(pe, lam, mask)
    flip = torch.tensor([1.0, -1.0, -1.0, 1.0])
    assert torch.allclose(enc(pe * flip, lam, mask), ref, atol=1e-6)
    assert torch.allclose(enc.train()(pe, lam, mask), ref, atol=1e-6)  # no flipping needed


def test_encoder_without_eigvals_and_shape_errors():
    enc = LapPEEncoder(3, 4, use_eigvals=False)
    pe = torch.randn(5, 3, requires_grad=True)
    enc(pe).sum().backward()
    assert pe.grad is not None and torch.isfinite(pe.grad).all()
    with pytest.raises(ValueError, match=r"pe must have shape \(N, 3\)"):
        enc(torch.randn(5, 4))
    with_lam = LapPEEncoder(3, 4).eval()  # eigvals omitted: read as zeros
    assert torch.equal(with_lam(pe), with_lam(pe, torch.zeros(5, 3)))
    with pytest.raises(ValueError, match="mask must have shape"):
        enc(torch.randn(5, 3), mask=torch.ones(5, 2, dtype=torch.bool))


def test_sinusoidal_pe_matches_formula():
    length, channels = 7, 6
    pe = sinusoidal_pe(length, channels)
    assert pe.shape == (length, channels) and pe.dtype == torch.float32
    for p in range(length):
        for i in range(channels // 2):
            angle = p / 10000.0 ** (2 * i / channels)
            assert math.isclose(pe[p, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(pe[p, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)
    assert torch.allclose(sinusoidal_pe(3, 4, base=100.0)[2, 2], torch.tensor(math.sin(2 / 10.0)))
    with pytest.raises(ValueError, match="channels must be a positive even int"):
        sinusoidal_pe(4, 5)


def test_sinusoidal_pe_2d_row_major_halves():
    h, w, c = 3, 4, 8
    pe = sinusoidal_pe_2d(h, w, c)
    assert pe.shape == (h * w, c)
    rows, cols = sinusoidal_pe(h, c // 2), sinusoidal_pe(w, c // 2)
    for r in range(h):
        for col in range(w):
            assert torch.equal(pe[r * w + col], torch.cat([rows[r], cols[col]]))
    for bad in (6, 3, 0):
        with pytest.raises(ValueError, match="multiple of 4"):
            sinusoidal_pe_2d(2, 2, bad)


def test_lappe_encoder_sign_flips_per_graph_and_checks_num_graphs():
    enc = LapPEEncoder(3, 4, use_eigvals=False).train()
    pe = torch.ones(6, 3)
    out = enc(pe, num_graphs=6)  # no batch: one graph, one sign row for all nodes
    assert torch.allclose(out, out[:1].expand_as(out))
    batch = torch.tensor([0, 0, 1, 1, 2, 2], dtype=torch.uint8)
    out = enc(pe, batch=batch)
    assert torch.equal(out[0], out[1]) and torch.equal(out[2], out[3])  # per graph, not a mask
    with pytest.raises(ValueError, match="num_graphs=2 but batch holds graph id 2"):
        enc(pe, batch=batch, num_graphs=2)
