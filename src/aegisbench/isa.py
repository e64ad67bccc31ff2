"""One instruction-set profile for every process that makes bytes.

NumPy, OpenCV (and the IPP it ships), OpenBLAS, numba and torch pick their kernels at run
time from the CPU they find: the same float32 resize, exp or matrix product rounds
differently on an AVX-512 machine than on an AVX2 one, and a pixel near a rounding edge
then lands on another code. The embedded default built on two machines of one kind gave
two digests that way (0.5.0: ``8e8c7ca4…`` with AVX-512 kernels, ``083a4edf…`` without).

:func:`pin` caps every one of those libraries at x86-64-v3 (AVX2 + FMA) through the
environment variables they read when they load, so an AVX2 laptop and an AVX-512 server
run the same kernels and write the same bytes. ``import aegisbench`` leaves the process
alone: the ``aegisbench`` command (:mod:`aegisbench.cli`) pins before NumPy loads, tests pin in
``conftest.py``, and a Python program calls :func:`aegisbench.pin_isa` first;
:func:`require` refuses to make bytes in a process where NumPy or OpenCV loaded before the
cap (one line, exit 2). Child processes inherit the variables (Ray workers get them in
their ``runtime_env``).
A CPU below x86-64-v3 (or not x86) runs its native kernels under profile ``native-<arch>``,
recorded in the manifest; the pinned digests hold for ``x86-64-v3``.

MKL (torch's BLAS) is pinned to its ``COMPATIBLE`` branch, not ``AVX2``: MKL runs the
``AVX2`` branch on Intel CPUs only and its vendor-chosen ``AUTO`` branch on an AMD one, so
``AVX2`` pinned nothing across vendors. What else torch needs to give the same bits on
every CPU (oneDNN off, a fixed thread count) is :mod:`aegisbench.kernels`.

>>> profile() in ("x86-64-v3",) or profile().startswith("native-")
True
>>> sorted(set(ENV) - set(cap_env({"avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm"})))
[]
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from aegisbench.errors import BadInput

PROFILE = "x86-64-v3"
#: /proc/cpuinfo flags of x86-64-v3 (``abm`` is LZCNT).
V3_FLAGS = frozenset({"avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm"})
#: The OpenBLAS kernels every x86-64-v3 machine is pinned to (``OPENBLAS_CORETYPE``).
OPENBLAS_CORE = "Haswell"
#: The MKL branch every machine is pinned to (``MKL_CBWR``: the one run on Intel and AMD alike).
MKL_BRANCH = "COMPATIBLE"
#: The variables :func:`pin` sets (values depend on what the CPU has above the cap).
ENV = ("NPY_DISABLE_CPU_FEATURES", "OPENCV_CPU_DISABLE", "OPENCV_IPP", "OPENBLAS_CORETYPE",
       "NUMBA_CPU_NAME", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR")
#: NumPy's dispatch targets above x86-64-v3, with the cpuinfo flags each needs.
_NUMPY_ABOVE = {"X86_V4": {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"},
                "AVX512_ICL": {"avx512f", "avx512_vbmi2", "avx512_bitalg", "avx512_vpopcntdq"},
                "AVX512_SPR": {"avx512f", "avx512_fp16"}}
_SKX = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}
#: OpenCV's names (``cv::checkHardwareSupport``) above AVX2, with the flags each needs.
_OPENCV_ABOVE = {"AVX512F": {"avx512f"}, "AVX512CD": {"avx512cd"}, "AVX512BW": {"avx512bw"},
                 "AVX512DQ": {"avx512dq"}, "AVX512VL": {"avx512vl"}, "AVX512IFMA": {"avx512ifma"},
                 "AVX512VBMI": {"avx512vbmi"}, "AVX512-COMMON": {"avx512f", "avx512cd"},
                 "AVX512-SKX": _SKX, "AVX512-CNL": _SKX | {"avx512ifma", "avx512vbmi"},
                 "AVX512-CLX": _SKX | {"avx512_vnni"},
                 "AVX512-ICL": _SKX | {"avx512ifma", "avx512vbmi", "avx512_vnni", "avx512_vbmi2",
                                       "avx512_bitalg", "avx512_vpopcntdq"}}
#: OpenCV's feature ids of AVX512F and AVX512-SKX (``cv::CpuFeatures``), for :func:`require`.
_CV_AVX512F, _CV_AVX512_SKX = 13, 256


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The first processor's flags in ``cpuinfo`` (empty where it cannot be read)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def cap_env(flags: frozenset[str] | set[str]) -> dict[str, str]:
    """The variables that cap every library at x86-64-v3 on a CPU with ``flags`` ({} below it)."""
    if not V3_FLAGS <= set(flags):
        return {}
    has = lambda need: need <= set(flags)  # noqa: E731
    return {
        "NPY_DISABLE_CPU_FEATURES": " ".join(k for k, need in _NUMPY_ABOVE.items() if has(need)),
        "OPENCV_CPU_DISABLE": ",".join(k for k, need in _OPENCV_ABOVE.items() if has(need)),
        "OPENCV_IPP": "avx2",          # IPP's l9 kernels, not k0
        "OPENBLAS_CORETYPE": OPENBLAS_CORE,
        "NUMBA_CPU_NAME": "haswell",
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_CBWR": MKL_BRANCH,        # see aegisbench.kernels
    }


def _machine() -> str:
    return platform.machine().lower() or "unknown"


def profile() -> str:
    """``x86-64-v3`` where the cap applies, else ``native-<machine>``."""
    if _machine() in ("x86_64", "amd64") and V3_FLAGS <= cpu_flags():
        return PROFILE
    return f"native-{_machine()}"


def pin() -> str:
    """Set the cap's variables in ``os.environ`` (overriding what is there) and return the
    profile. Only libraries loaded after this call are capped: see :func:`require`."""
    prof = profile()
    if prof == PROFILE:
        os.environ.update(cap_env(cpu_flags()))
    return prof


def problems() -> list[str]:
    """Libraries of this process that run kernels above the profile (empty when pinned)."""
    if profile() != PROFILE:
        return []
    out = []
    if "numpy" in sys.modules:
        from numpy._core._multiarray_umath import __cpu_features__ as feats

        above = [k for k in _NUMPY_ABOVE if feats.get(k)]
        if above:
            out.append(f"numpy dispatches {'/'.join(above)}")
    if "cv2" in sys.modules:
        import cv2

        if cv2.checkHardwareSupport(_CV_AVX512F) or cv2.checkHardwareSupport(_CV_AVX512_SKX):
            out.append("OpenCV dispatches AVX-512")
        if "AVX-512" in cv2.ipp.getIppVersion():
            out.append("OpenCV's IPP runs AVX-512 kernels")
    if "torch" in sys.modules:
        import torch

        if "AVX512" in torch.backends.cpu.get_cpu_capability().upper():
            out.append("torch runs AVX-512 kernels")
    want = cap_env(cpu_flags())
    changed = sorted(k for k, v in want.items() if os.environ.get(k) != v)
    if changed:
        out.append("environment changed: " + ", ".join(changed))
    return out


def require(what: str) -> None:
    """Refuse (BadInput) to make ``what`` where a library runs kernels above the profile:
    its bytes would depend on this CPU."""
    found = problems()
    if found:
        raise BadInput(f"{what} would depend on this CPU: {'; '.join(found)} (run the aegisbench command, "
                       f"or call aegisbench.pin_isa() before numpy, cv2 or torch load)", where="instruction-set profile")
