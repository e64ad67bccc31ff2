"""Convolutions on NumPy's OpenBLAS (aegisbench.conv_gemm): torch's convolution, forward and
backward, derived independently (float64 finite differences by torch.autograd.gradcheck and
torch's own conv2d), routed only where it applies, and the same bits on any BLAS thread count."""

from __future__ import annotations

import hashlib

import pytest
import torch
import torch.nn.functional as F

from aegisbench import kernels
from aegisbench.conv_gemm import OpenBLASConv, conv2d

# (batch, in, out, size, kernel, stride, padding, bias)
SHAPES = [(2, 3, 4, 7, 3, 1, 1, True), (1, 2, 5, 8, 3, 2, 1, False), (3, 4, 2, 5, 1, 1, 0, True),
          (2, 3, 3, 9, (3, 1), (2, 1), (1, 0), True), (1, 2, 2, 6, 5, 1, 2, False)]


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_and_gradients_are_torchs_convolution(shape):
    n, c, o, size, k, stride, padding, bias = shape
    kh, kw = (k, k) if isinstance(k, int) else k
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n, c, size, size + 1, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(o, c, kh, kw, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(o, dtype=torch.float64, generator=g, requires_grad=True) if bias else None
    ours = conv2d(x, w, b, stride, padding)
    theirs = F.conv2d(x, w, b, stride, padding)
    assert ours.shape == theirs.shape and torch.allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    inputs = (x, w) + ((b,) if bias else ())
    assert torch.autograd.gradcheck(lambda *t: conv2d(t[0], t[1], t[2] if bias else None, stride, padding), inputs)
    up = torch.randn(theirs.shape, dtype=torch.float64, generator=g)
    ours_grads = torch.autograd.grad((ours * up).sum(), inputs)
    theirs_grads = torch.autograd.grad((theirs * up).sum(), inputs)
    for a, t in zip(ours_grads, theirs_grads):
        assert torch.allclose(a, t, rtol=1e-10, atol=1e-10)


def test_the_mode_routes_the_convolutions_it_can_compute_and_leaves_the_rest_to_torch():
    torch.manual_seed(0)
    x = torch.randn(2, 16, 20, 20)
    conv = torch.nn.Conv2d(16, 32, 3, padding=1)
    depthwise = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
    dilated = torch.nn.Conv2d(16, 8, 3, padding=2, dilation=2)
    same = torch.nn.Conv2d(16, 8, 3, padding="same")
    with torch.no_grad():
        with OpenBLASConv():
            routed, dw, dil, sm = conv(x), depthwise(x), dilated(x), same(x)
        assert torch.equal(routed, conv2d(x, conv.weight, conv.bias, 1, 1))  # the module's conv ran here
        assert torch.allclose(routed, conv(x), atol=1e-5)
        assert torch.equal(dw, depthwise(x)) and torch.equal(dil, dilated(x)) and torch.equal(sm, same(x))


def test_a_training_step_repeats_bit_for_bit_on_any_blas_thread_count():
    """The convolutions' sums have one order: the same step on 1 thread twice gives the same bits
    (and portable() pins the BLAS to its own thread count, whatever the caller set)."""
    from threadpoolctl import threadpool_limits

    def step() -> str:
        torch.manual_seed(1)
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 24, 3, stride=2, padding=1), torch.nn.SiLU(),
                                  torch.nn.Conv2d(24, 48, 3, padding=1), torch.nn.SiLU(), torch.nn.Conv2d(48, 8, 1))
        x = torch.randn(4, 3, 64, 64)
        with kernels.portable(1, gemm="openblas"):
            net(x).square().mean().backward()
        h = hashlib.sha256()
        for p in net.parameters():
            h.update(p.grad.numpy().tobytes())
        return h.hexdigest()

    first = step()
    with threadpool_limits(2, user_api="blas"):
        assert step() == first


def test_bad_calls_are_refused():
    with pytest.raises(ValueError, match="do not match"):
        conv2d(torch.randn(1, 3, 5, 5), torch.randn(2, 4, 3, 3))
    with pytest.raises(TypeError, match="stride"):
        conv2d(torch.randn(1, 3, 5, 5), torch.randn(2, 3, 3, 3), stride=1.5)


def test_a_pointwise_input_changed_in_place_after_the_forward_is_refused_by_autograd():
    x = torch.randn(1, 4, 3, 3, requires_grad=True)
    y = x * 1.0
    out = conv2d(y, torch.randn(2, 4, 1, 1, requires_grad=True))
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
