"""attnkit on CuPy arrays (the GPU machine, with cupy unpacked from .deps/ by
scripts/gpu_check.sh; skipped where cupy or a GPU is missing): cupy in, cupy
out, on the current CuPy stream, against the float64 NumPy oracle."""
import numpy as np
import pytest

cupy = pytest.importorskip("cupy")
try:
    if cupy.cuda.runtime.getDeviceCount() < 1:
        raise RuntimeError("no device")
except Exception as e:  # cupy imports without a driver; the first runtime call says so
    pytest.skip(f"cupy has no CUDA device ({e})", allow_module_level=True)

import attnkit  # noqa: E402
from reference_numpy import attention_ref, rel_l2  # noqa: E402
from refusals import expect_refused  # noqa: E402

RNG = np.random.default_rng(0)


def randn(*shape, dtype=np.float16):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype,bound", [(np.float16, 1e-2), (np.float32, 1e-5)])
@pytest.mark.parametrize("causal", [False, True])
def test_cupy_in_cupy_out(dtype, bound, causal):
    q, k, v = randn(2, 133, 8, 128, dtype=dtype), randn(2, 150, 2, 128, dtype=dtype), randn(2, 150, 2, 128, dtype=dtype)
    out = attnkit.attention(cupy.asarray(q), cupy.asarray(k), cupy.asarray(v), causal=causal)
    assert isinstance(out, cupy.ndarray) and out.dtype == dtype and out.shape == (2, 133, 8, 128)
    assert attnkit.last_backend() in {"fa3", "fa2", "cuda_sdpa"}
    ref, _ = attention_ref(q, k, v, causal=causal)
    assert rel_l2(cupy.asnumpy(out), ref) < bound


def test_on_a_non_default_cupy_stream():
    q, k, v = randn(1, 300, 4, 64), randn(1, 300, 4, 64), randn(1, 300, 4, 64)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        qd, kd, vd = cupy.asarray(q), cupy.asarray(k), cupy.asarray(v)  # copies queued on `stream`
        out = attnkit.attention(qd, kd, vd)  # must queue behind them on the same stream
    stream.synchronize()
    ref, _ = attention_ref(q, k, v)
    assert rel_l2(cupy.asnumpy(out), ref) < 1e-2


def test_mixed_devices_are_refused():
    q = cupy.asarray(randn(1, 4, 2, 64))
    expect_refused("AK1105", attnkit.attention, q, randn(1, 4, 2, 64), cupy.asarray(randn(1, 4, 2, 64)))
