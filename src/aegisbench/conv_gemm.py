"""2-D convolutions on NumPy's OpenBLAS: im2col (torch's ``unfold``) + OpenBLAS SGEMM.

:func:`aegisbench.kernels.portable` keeps torch's CPU convolutions on their own im2col + MKL
path with MKL pinned to its ``COMPATIBLE`` branch, the one MKL runs on every x86-64 CPU; that
branch is SSE2, about 23 GFLOP/s on one core here. NumPy's OpenBLAS is pinned by
:mod:`aegisbench.isa` to its ``Haswell`` kernels (AVX2 + FMA; ``OPENBLAS_CORETYPE``), which
run alike on every x86-64-v3 CPU of any vendor: 61-85 GFLOP/s on the same core and shapes.
:class:`OpenBLASConv` (a ``TorchFunctionMode``) sends every ``conv2d`` of a block that it can
take (CPU float32/float64, batched, ``groups`` 1, ``dilation`` 1, numeric padding) through
:func:`conv2d`, forward and backward, and leaves any other to torch. The result is a
different float order from torch's own, so weights trained one way are not the bytes of the
other: the kernels a result was made with are part of its record
(:func:`aegisbench.kernels.describe`).

>>> import torch
>>> x, w = torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3)
>>> with OpenBLASConv():
...     y = torch.nn.functional.conv2d(x, w, padding=1)
>>> bool(torch.allclose(y, torch.nn.functional.conv2d(x, w, padding=1), atol=1e-5)), tuple(y.shape)
(True, (2, 4, 9, 9))
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_CONVS = {torch.conv2d, F.conv2d}


def _pair(v, name: str) -> tuple[int, int]:
    if isinstance(v, int) and not isinstance(v, bool):
        return v, v
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(i, int) for i in v):
        return int(v[0]), int(v[1])
    raise TypeError(f"{name} must be an int or a pair of ints, got {v!r}")


def _mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` (broadcast over a leading batch) by NumPy's BLAS: one GEMM per batch item
    (a transposed operand is handed to the BLAS as such, not copied)."""
    return np.matmul(a, b)


def _windows(shape: tuple, k: tuple, stride: tuple, padding: tuple):
    """``(ho, wo)`` and, for each kernel tap ``(i, j)``, the slices of the padded input it reads."""
    h, w = shape[-2:]
    ho = (h + 2 * padding[0] - k[0]) // stride[0] + 1
    wo = (w + 2 * padding[1] - k[1]) // stride[1] + 1
    taps = [(i, j, np.s_[i:i + stride[0] * (ho - 1) + 1:stride[0]], np.s_[j:j + stride[1] * (wo - 1) + 1:stride[1]])
            for i in range(k[0]) for j in range(k[1])]
    return ho, wo, taps


def _im2col(x: np.ndarray, k: tuple, stride: tuple, padding: tuple) -> np.ndarray:
    """``(n, c*kh*kw, ho*wo)`` columns of ``x`` (n, c, h, w): one strided copy per kernel tap
    (what ``torch.nn.functional.unfold`` gives, 2-4x faster here)."""
    n, c = x.shape[:2]
    ho, wo, taps = _windows(x.shape, k, stride, padding)
    if any(padding):
        x = np.pad(x, ((0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1])))
    cols = np.empty((n, c, k[0], k[1], ho, wo), x.dtype)
    for i, j, rows, colums in taps:
        cols[:, :, i, j] = x[:, :, rows, colums]
    return cols.reshape(n, c * k[0] * k[1], ho * wo)


def _col2im(cols: np.ndarray, shape: tuple, k: tuple, stride: tuple, padding: tuple) -> np.ndarray:
    """The adjoint of :func:`_im2col`: each tap's columns added back where it read them (taps in
    a fixed order, so the sums have one order)."""
    n, c, h, w = shape
    ho, wo, taps = _windows(shape, k, stride, padding)
    out = np.zeros((n, c, h + 2 * padding[0], w + 2 * padding[1]), cols.dtype)
    cols = cols.reshape(n, c, k[0], k[1], ho, wo)
    for i, j, rows, colums in taps:
        out[:, :, rows, colums] += cols[:, :, i, j]
    return out[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + w]


class _Conv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, stride, padding):
        n, c, h, wd = x.shape
        o, _, kh, kw = w.shape
        k = (kh, kw)
        pointwise = (kh, kw, *stride, *padding) == (1, 1, 1, 1, 0, 0)
        xn = x.detach().contiguous().numpy()
        cols = xn.reshape(n, c, h * wd) if pointwise else _im2col(xn, k, stride, padding)
        ho, wo, _ = _windows(x.shape, k, stride, padding)
        wm = w.detach().contiguous().numpy().reshape(o, -1)
        out = torch.from_numpy(_mm(wm, cols))  # (n, o, ho*wo)
        if b is not None:
            out += b.detach().reshape(1, o, 1)
        # a pointwise convolution's columns are its input: saved as the tensor, so autograd
        # refuses a backward after an in-place change of it
        ctx.save_for_backward(w, x if pointwise else torch.from_numpy(cols))
        ctx.geometry = (n, c, h, wd, k, stride, padding, ho, wo, pointwise, b is not None)
        return out.reshape(n, o, ho, wo)

    @staticmethod
    def backward(ctx, grad):
        w, cols = ctx.saved_tensors
        cols = cols.detach().contiguous().numpy()
        n, c, h, wd, k, stride, padding, ho, wo, pointwise, has_bias = ctx.geometry
        o = w.shape[0]
        g = grad.contiguous().numpy().reshape(n, o, ho * wo)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gcols = _mm(w.detach().contiguous().numpy().reshape(o, -1).T, g)  # (n, c*kh*kw, ho*wo)
            gx = torch.from_numpy(np.ascontiguousarray(
                gcols.reshape(n, c, h, wd) if pointwise else _col2im(gcols, (n, c, h, wd), k, stride, padding)))
        if ctx.needs_input_grad[1]:
            cols = cols.reshape(n, -1, ho * wo)
            gw = torch.from_numpy(_mm(g, cols.transpose(0, 2, 1)).sum(0).reshape(w.shape))
        if has_bias and ctx.needs_input_grad[2]:
            gb = grad.sum((0, 2, 3))
        return gx, gw, gb, None, None


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           stride=1, padding=0) -> torch.Tensor:
    """``torch.nn.functional.conv2d`` (groups 1, dilation 1) by im2col + NumPy's SGEMM; autograd-aware.

    >>> x, w = torch.randn(1, 2, 5, 5, dtype=torch.float64), torch.randn(3, 2, 3, 3, dtype=torch.float64)
    >>> bool(torch.allclose(conv2d(x, w, stride=2), torch.nn.functional.conv2d(x, w, stride=2)))
    True
    """
    if x.dim() != 4 or weight.dim() != 4 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"conv2d: input {tuple(x.shape)} and weight {tuple(weight.shape)} do not match")
    return _Conv.apply(x, weight, bias, _pair(stride, "stride"), _pair(padding, "padding"))


def _routed(args: tuple, kwargs: dict) -> dict | None:
    """The arguments of a ``conv2d`` call by name, when :func:`conv2d` computes it; None when
    torch's own kernel does."""
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    call = dict(zip(names, args)) | kwargs
    x, w, b = call.get("input"), call.get("weight"), call.get("bias")
    tensors = [t for t in (x, w, b) if t is not None]
    if not all(isinstance(t, torch.Tensor) for t in tensors) or x is None or w is None:
        return None
    if x.dim() != 4 or x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64):
        return None
    if any(t.device != x.device or t.dtype != x.dtype for t in tensors):
        return None
    if call.get("groups", 1) != 1 or call.get("dilation", 1) not in (1, (1, 1), [1, 1]):
        return None
    try:
        _pair(call.get("stride", 1), "stride"), _pair(call.get("padding", 0), "padding")
    except TypeError:  # 'same' / 'valid' padding
        return None
    return call


class OpenBLASConv(TorchFunctionMode):
    """Within the block, every ``conv2d`` that :func:`conv2d` can compute runs there."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        call = _routed(args, kwargs) if func in _CONVS else None
        if call is None:
            return func(*args, **kwargs)
        return conv2d(call["input"], call["weight"], call.get("bias"), call.get("stride", 1), call.get("padding", 0))


@functools.cache
def openblas() -> str:
    """The OpenBLAS NumPy runs, e.g. ``OpenBLAS 0.3.31 Haswell`` (part of a result's record)."""
    from threadpoolctl import threadpool_info

    for lib in threadpool_info():
        if lib.get("internal_api") == "openblas" and "numpy" in str(lib.get("filepath", "")):
            return f"OpenBLAS {lib.get('version')} {lib.get('architecture')}"
    return f"NumPy {np.__version__} BLAS"
