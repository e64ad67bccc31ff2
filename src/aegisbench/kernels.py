"""CPU kernels whose float sums have one order on every x86-64 machine (issue 36, item 2).

:mod:`aegisbench.isa` caps every library at one instruction set. That was not enough for the
reference models: a fresh clone on an Intel Xeon rebuilt the dataset's digest and then changed
most reference rows of the committed outputs (an AMD EPYC's). Two libraries under torch pick
their arithmetic from the CPU they find:

* **oneDNN** (torch's ``mkldnn`` backend, which runs CPU convolutions by default) chooses
  kernels and blocking per CPU (instruction set, cache sizes), and with them the order of the
  sums of a convolution: one training with oneDNN capped at SSE4.1, AVX2 or AVX-512 gives three
  different weights files (``tests/test_kernels.py``).
* **MKL** (torch's BLAS) honours ``MKL_CBWR=AVX2`` only on Intel CPUs; on an AMD CPU it runs
  its ``AUTO`` branch (``MKL_VERBOSE=1`` prints ``CNR:AUTO``), so the 0.5 pin left it to the
  vendor. ``COMPATIBLE`` (SSE2, no approximate reciprocals) is the one branch MKL runs on every
  x86-64 CPU; :mod:`aegisbench.isa` pins it. MKL promises the same bits only for a fixed number
  of threads (``COMPATIBLE`` has no thread-independent ``STRICT`` mode): the same products on 1,
  2, 4 and 8 threads gave four different results here.

:func:`portable` runs a block with oneDNN and NNPACK off (convolutions take torch's own
im2col + MKL GEMM path) on a fixed number of torch threads; the reference detectors' training,
every CPU ``detect`` and the ConvLSTM forecaster run in it. :func:`describe` is the machine
class a result records (``train.json``, ``submission.yaml``): the same string, the same bytes.

>>> said = describe(2, onednn=True).split(", ")
>>> said[1], said[3], said[4].split()[0]
('oneDNN on', '2 threads', 'torch')
>>> describe(4, device="cuda:0").split(", ")[0]
'cuda:0'
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from aegisbench import isa


#: where a CPU convolution's matrix products run: torch's own path (MKL ``COMPATIBLE``), or
#: :mod:`aegisbench.conv_gemm` (NumPy's OpenBLAS, ``Haswell`` kernels: about 1.7x a reference
#: model's training and detection here, perf/conv_gemm.py; other bytes)
GEMMS = ("mkl", "openblas")


def check_gemm(gemm: object, where: str = "gemm", *, onednn: bool = False) -> str:
    """``gemm`` if it is one of :data:`GEMMS` and can run with ``onednn``, else ValueError naming
    ``where`` (``openblas`` runs the convolutions itself, so oneDNN cannot be on as well).

    >>> check_gemm("openblas")
    'openblas'
    """
    if gemm not in GEMMS:
        raise ValueError(f"{where} must be one of {', '.join(GEMMS)}, got {gemm!r}")
    if gemm == "openblas" and onednn:
        raise ValueError(f"{where} openblas runs the convolutions itself: oneDNN cannot be on as well")
    return gemm  # type: ignore[return-value]


def describe(threads: int, *, onednn: bool = False, device: str = "cpu", gemm: str = "mkl") -> str:
    """The kernels a CPU result was computed with, e.g. ``x86-64-v3, oneDNN off, MKL COMPATIBLE,
    1 thread, torch 2.14.1`` (a GPU result: the device and torch); with ``gemm="openblas"``
    the convolutions' BLAS is appended (``conv OpenBLAS 0.3.31 Haswell``). The same recipe on
    the same string gives the same bytes, whatever the CPU."""
    import torch

    if not device.startswith("cpu"):
        return f"{device}, torch {torch.__version__}"
    branch = os.environ.get("MKL_CBWR") or "unpinned"
    unit = "thread" if threads == 1 else "threads"
    said = (f"{isa.profile()}, oneDNN {'on' if onednn else 'off'}, MKL {branch}, {threads} {unit}, "
            f"torch {torch.__version__}")
    if check_gemm(gemm) == "openblas":
        from aegisbench.conv_gemm import openblas

        said += f", conv {openblas()}"
    return said


@contextmanager
def portable(threads: int = 1, *, onednn: bool = False, gemm: str = "mkl") -> Iterator[str]:
    """Run the block on ``threads`` torch threads with oneDNN and NNPACK off (``onednn=True``
    leaves them on: faster, and the result then depends on the CPU); yields :func:`describe`.
    ``gemm="openblas"``: the block's convolutions run on NumPy's OpenBLAS
    (:class:`aegisbench.conv_gemm.OpenBLASConv`) on ``threads`` BLAS threads (its sums depend on
    the thread count too). The caller's thread counts and backend flags come back on exit."""
    import torch

    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    check_gemm(gemm, onednn=onednn)
    before, mkldnn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    (nnpack,) = torch.backends.nnpack.set_flags(onednn)
    torch.backends.mkldnn.enabled = onednn
    torch.set_num_threads(threads)
    try:
        with ExitStack() as stack:
            if gemm == "openblas":
                from threadpoolctl import threadpool_limits

                from aegisbench.conv_gemm import OpenBLASConv

                stack.enter_context(threadpool_limits(threads, user_api="blas"))
                stack.enter_context(OpenBLASConv())
            yield describe(threads, onednn=onednn, gemm=gemm)
    finally:
        torch.set_num_threads(before)
        torch.backends.mkldnn.enabled = mkldnn
        torch.backends.nnpack.set_flags(nnpack)
