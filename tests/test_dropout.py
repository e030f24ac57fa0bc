import pytest
import torch

from graphattn.dropout import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_scale_and_gradient(p):
    torch.manual_seed(0)
    x = torch.ones(200_000, dtype=torch.float64, requires_grad=True)
    y = dropout(x, p, training=True)
    kept = y != 0
    # kept fraction ~ 1 - p (binomial std ~ 0.0011 at n=2e5), kept values scaled by 1/(1-p)
    assert abs(kept.double().mean().item() - (1 - p)) < 0.006
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
    g = torch.randn_like(x)
    y.backward(g)
    assert torch.allclose(x.grad, g * kept / (1 - p))


def test_identity_cases_and_module():
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
    assert ((a == 0) | torch.isclose(a, x / 0.7)).all()


def test_gradcheck():
    x = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(3)
    mask_run = lambda t: (torch.manual_seed(3), dropout(t, 0.4))[1]  # noqa: E731
    assert torch.autograd.gradcheck(mask_run, (x,))
