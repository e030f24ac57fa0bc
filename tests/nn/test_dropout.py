import pytest
import torch

import graphattn.nn.dropout as D
from graphattn.nn.dropout import Dropout, dropout, keep_mask
from graphattn.ops.extension import fused_available

ROUTES = ["python", pytest.param("cpp", marks=pytest.mark.skipif(not fused_available(),
                                                                 reason="C++ extension not built"))]


@pytest.fixture(params=ROUTES)
def route(request, monkeypatch):
    """Run a test through the C++ seeded kernel and through the pure-PyTorch mask."""
    if request.param == "python":
        monkeypatch.setattr(D, "_seeded_available", lambda: False)
    return request.param


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_scale_and_gradient(p, route):
    torch.manual_seed(0)
    x = torch.ones(200_000, dtype=torch.float64, requires_grad=True)
    y = dropout(x, p, training=True)
    kept = y != 0
    # kept fraction ~ 1 - p (binomial std ~ 0.0011 at n=2e5); kept values scaled by the
    # inverse of the exact keep probability 1 - round(65536 p) / 65536 (within 1e-4 of 1 - p)
    assert abs(kept.double().mean().item() - (1 - p)) < 0.006
    scale = 65536 / (65536 - round(p * 65536))
    assert abs(scale * (1 - p) - 1) < 1e-4
    assert torch.allclose(y[kept], torch.full_like(y[kept], scale))
    g = torch.randn_like(x)
    y.backward(g)
    assert torch.allclose(x.grad, g * kept * scale)  # backward uses the forward's mask


def test_mask_elements_are_independent_and_any_shape(route):
    """Neighbours share random draws (4 per 64-bit draw / one hash chain): still independent."""
    torch.manual_seed(0)
    m = (dropout(torch.ones(400_001), 0.5) != 0).double()  # odd size: not a multiple of 4
    assert m.shape == (400_001,)
    assert abs(m.mean().item() - 0.5) < 0.005
    for lag in (1, 2, 3, 4, 16, 1 << 14):  # P(both kept) = 1/4 for independent elements
        assert abs((m[:-lag] * m[lag:]).mean().item() - 0.25) < 0.004
    m2 = (dropout(torch.ones(400_001), 0.5) != 0).double()  # the next call: a fresh mask
    assert abs((m * m2).mean().item() - 0.25) < 0.004
    x = torch.randn(7, 3, 5)
    y = dropout(x, 0.3)
    assert y.shape == x.shape and ((y == 0) | torch.isclose(y, x / (1 - round(0.3 * 65536) / 65536))).all()
    xt = torch.randn(5, 8).t()  # non-contiguous input
    yt = dropout(xt, 0.5)
    assert ((yt == 0) | torch.isclose(yt, 2 * xt)).all() and 0 < int((yt == 0).sum()) < 40
    torch.manual_seed(2)
    ref = torch.nn.functional.dropout(x, 1e-6)
    torch.manual_seed(2)
    assert torch.equal(dropout(x, 1e-6), ref)  # rounds to t = 0: nn.Dropout itself


def test_python_mask_helper():
    torch.manual_seed(0)
    m = keep_mask((3, 100_001), round(0.25 * 65536))
    assert m.shape == (3, 100_001) and m.dtype == torch.bool
    assert abs(m.double().mean().item() - 0.75) < 0.005


def test_identity_cases_and_module(route):
    x = torch.randn(50, 8)
    assert torch.equal(dropout(x, 0.5, training=False), x)
    assert torch.equal(dropout(x, 0.0, training=True), x)
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))
    m = Dropout(0.3)
    assert m.state_dict() == {} and repr(m) == "Dropout(p=0.3, inplace=False)"
    m.eval()
    assert torch.equal(m(x), x)
    m.train()
    torch.manual_seed(1)
    a = m(x)
    torch.manual_seed(1)
    assert torch.equal(a, m(x))  # seeded: reproducible
    assert not torch.equal(a, m(x))  # and a new mask on the next call
    assert ((a == 0) | torch.isclose(a, x / 0.7)).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision(dtype, route):
    torch.manual_seed(0)
    x = torch.ones(100_000, dtype=dtype)
    y = dropout(x, 0.25)
    assert y.dtype == dtype and abs(float((y != 0).float().mean()) - 0.75) < 0.01
    assert torch.allclose(y[y != 0].float(), torch.tensor(4 / 3), rtol=1e-2)


def test_gradcheck(route):
    x = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    mask_run = lambda t: (torch.manual_seed(3), dropout(t, 0.4))[1]  # noqa: E731
    assert torch.autograd.gradcheck(mask_run, (x,))
    assert torch.autograd.gradgradcheck(mask_run, (x,))


@pytest.mark.skipif(not fused_available(), reason="C++ extension not built")
def test_cpp_mask_does_not_depend_on_threads():
    """Counter-based: each element's bits depend on (seed, position) only, so a tensor large
    enough to be split across threads gets the same mask with 1 or 2 threads."""
    x = torch.randn(3 * (1 << 21) + 5)
    n = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            torch.manual_seed(7)
            outs.append(dropout(x, 0.5))
    finally:
        torch.set_num_threads(n)
    assert torch.equal(outs[0], outs[1])
