"""The instruction-set cap (aegisbench.isa): every byte-making process runs x86-64-v3 kernels.

The embedded default built with AVX-512 kernels and with AVX2 ones gave two digests; the
pinned digest test is the cross-machine check, these check the cap itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from aegisbench import isa

V3 = {"avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm"}
SKX = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}
HAS_AVX512 = isa.profile() == isa.PROFILE and "avx512f" in isa.cpu_flags()


def test_cap_env_follows_the_cpu_flags():
    assert isa.cap_env({"sse2", "avx"}) == {}  # below x86-64-v3: native kernels, nothing capped
    avx2 = isa.cap_env(V3)
    assert avx2["NPY_DISABLE_CPU_FEATURES"] == "" and avx2["OPENCV_CPU_DISABLE"] == ""
    assert avx2["OPENBLAS_CORETYPE"] == "Haswell" and avx2["ATEN_CPU_CAPABILITY"] == "avx2"
    skx = isa.cap_env(V3 | SKX)
    assert skx["NPY_DISABLE_CPU_FEATURES"].split() == ["X86_V4"]
    assert {"AVX512F", "AVX512-SKX", "AVX512-COMMON"} <= set(skx["OPENCV_CPU_DISABLE"].split(","))
    assert "AVX512-ICL" not in skx["OPENCV_CPU_DISABLE"].split(",")  # only what the CPU has (no warning)
    icl = isa.cap_env(V3 | SKX | {"avx512ifma", "avx512vbmi", "avx512_vnni", "avx512_vbmi2",
                                 "avx512_bitalg", "avx512_vpopcntdq"})
    assert icl["NPY_DISABLE_CPU_FEATURES"].split() == ["X86_V4", "AVX512_ICL"]
    assert "AVX512-ICL" in icl["OPENCV_CPU_DISABLE"].split(",")


def test_cpu_flags_reads_the_first_processor(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\nflags\t\t: other\n")
    assert isa.cpu_flags(info) == {"fpu", "avx2", "fma"}
    assert isa.cpu_flags(tmp_path / "absent") == frozenset()


def _worker_problems() -> list[str]:
    import numpy  # noqa: F401  loaded in the worker as the build's tasks load it

    return isa.problems()


def test_the_test_process_and_its_workers_are_capped():
    import cv2
    import numpy  # noqa: F401

    assert isa.problems() == []
    isa.require("bytes")  # no BadInput
    if isa.profile() == isa.PROFILE:
        assert "AVX-512" not in cv2.ipp.getIppVersion()
        assert os.environ["OPENBLAS_CORETYPE"] == "Haswell"
    with ProcessPoolExecutor(1) as pool:
        assert pool.submit(_worker_problems).result() == []


@pytest.mark.skipif(not HAS_AVX512, reason="only a CPU with AVX-512 dispatches above the cap")
def test_numpy_loaded_before_aegisbench_is_refused():
    env = {k: v for k, v in os.environ.items() if k not in isa.ENV}
    code = ("import numpy\nfrom aegisbench.builders.sources import materialize_source\n"
            "from aegisbench.errors import BadInput\nfrom types import SimpleNamespace\n"
            "try:\n    materialize_source(SimpleNamespace(name='s'), '0', '.')\nexcept BadInput as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "would depend on this CPU: numpy dispatches X86_V4" in out.stdout, out.stderr[-2000:]


@pytest.mark.skipif(not HAS_AVX512, reason="only a CPU with AVX-512 has kernels above the cap to differ")
def test_the_cap_changes_what_an_avx512_cpu_computes():
    """Why the cap exists: the same resize + matrix product, capped and native, differ here."""
    code = ("import sys\nif sys.argv[1] == 'capped':\n    import aegisbench; aegisbench.pin_isa()\n"
            "import numpy as np, cv2, hashlib\n"
            "rng = np.random.default_rng(7)\na = rng.random((257, 263, 5))\nb = rng.random((5, 3))\n"
            "x = cv2.resize((a @ b).astype(np.float32), (611, 599), interpolation=cv2.INTER_CUBIC)\n"
            "y = cv2.GaussianBlur(np.exp(x * np.float32(1.7)), (0, 0), 2.3)\n"
            "print(hashlib.sha256(y.tobytes()).hexdigest())\n")
    env = {k: v for k, v in os.environ.items() if k not in isa.ENV}
    run = lambda mode: subprocess.run([sys.executable, "-c", code, mode], env=env, capture_output=True,  # noqa: E731
                                      text=True, timeout=120, check=True).stdout
    capped, native = run("capped"), run("native")
    assert capped == run("capped")  # the cap is deterministic
    assert capped != native


def test_mean_sobel_is_exact_and_the_same_on_every_kernel():
    """The calibration statistic that drifted (OpenCV float32) is now integer gradients plus
    correctly rounded steps: it equals OpenCV's float64 Sobel and has the same bits uncapped."""
    import cv2
    import numpy as np

    from aegisbench.corruptions.statistics import _luma, mean_sobel

    img = np.random.default_rng(3).integers(0, 256, (61, 83, 3), dtype=np.uint8)
    g = _luma(img).astype(np.float64) / 255.0
    ref = np.mean(np.hypot(cv2.Sobel(g, cv2.CV_64F, 1, 0, ksize=3), cv2.Sobel(g, cv2.CV_64F, 0, 1, ksize=3)))
    assert abs(mean_sobel(img) - ref) < 1e-12
    code = ("import numpy as np\nfrom aegisbench.corruptions.statistics import mean_sobel\n"
            "img = np.random.default_rng(3).integers(0, 256, (61, 83, 3), dtype=np.uint8)\n"
            "print(repr(mean_sobel(img)))\n")
    env = {k: v for k, v in os.environ.items() if k not in isa.ENV}
    native = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=120, check=True).stdout.strip()
    assert native == repr(mean_sobel(img))


def test_importing_aegisbench_leaves_the_process_alone_and_the_command_pins():
    """A notebook's own NumPy and torch keep their kernels: the import sets nothing; the CLI
    module and an explicit pin_isa() set the cap (on an x86-64-v3 machine)."""
    env = {k: v for k, v in os.environ.items() if k not in isa.ENV}
    code = ("import os, sys\nbefore = dict(os.environ)\nimport aegisbench, aegisbench.evaluation.submission\n"
            "print(dict(os.environ) == before)\n"
            "import aegisbench.cli\nprint(sorted(set(os.environ) - set(before)))\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         check=True).stdout.splitlines()
    assert out[0] == "True"
    want = sorted(isa.cap_env(isa.cpu_flags()))
    assert out[1] == repr(want)
    code = "import os, aegisbench\nprint(aegisbench.pin_isa(), sorted(k for k in os.environ if k in %r))" % (isa.ENV,)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         check=True).stdout.split(" ", 1)
    assert out[0] == isa.profile() and out[1].strip() == repr(want)


def test_drawing_a_calibration_figure_leaves_pyplot_and_its_backend_alone():
    """Scoring a forecaster from a notebook draws its calibration figure without pyplot: the
    user's backend and open figures are not touched."""
    code = ("import sys\nimport pyarrow as pa\nfrom aegisbench.evaluation.firespread_track import calibration_png\n"
            "png = calibration_png(pa.table({'severity': [0, 0], 'prob_pred': [0.2, 0.7], 'prob_true': [0.1, 0.8]}))\n"
            "print(png[:4] == b'\\x89PNG', 'matplotlib.pyplot' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.split() == ["True", "False"]
