"""Framework-neutral helpers: allocate outputs in the caller's framework and
find the stream its work is queued on. Inputs cross into C++ through DLPack."""
from . import _attnkit as _native

_DTYPE_NAMES = {
    "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
    "int8": "int8", "uint8": "uint8", "int32": "int32",
    "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2",
}


_FRAMEWORK_OF = {}  # type -> its framework: the split of __module__ costs ~0.3 us a call


def framework(x):
    """'torch', 'numpy', 'cupy' or the array's module name."""
    kind = type(x)
    try:
        return _FRAMEWORK_OF[kind]
    except KeyError:
        module = kind.__module__.split(".")[0]
        if len(_FRAMEWORK_OF) < 64:
            _FRAMEWORK_OF[kind] = module
        return module


_DTYPE_OF = {}  # dtype object -> attnkit's name: str() of a numpy dtype costs ~5 us a call


def dtype_name(x):
    """attnkit's name for the array's element type ('bf16', 'fp32', ...)."""
    dtype = x.dtype
    try:
        return _DTYPE_OF[dtype]
    except (KeyError, TypeError):  # TypeError: an unhashable dtype of some other framework
        name = str(dtype).replace("torch.", "")
        name = _DTYPE_NAMES.get(name, name)
        try:
            if len(_DTYPE_OF) < 64:
                _DTYPE_OF[dtype] = name
        except TypeError:
            pass
        return name


def device_kind(x, fw=None):
    """'cuda' or 'cpu'; `fw`: framework(x) when the caller has it."""
    fw = fw or framework(x)
    if fw == "torch":
        return "cuda" if x.is_cuda else "cpu"
    if fw == "cupy":
        return "cuda"
    return "cpu"


_torch = None  # the torch module once a torch array is seen (an `import torch` statement costs ~0.4 us a call)


def _torch_module():
    global _torch
    if _torch is None:
        import torch
        _torch = torch
    return _torch


_ITEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "uint8": 1, "int32": 4, "fp64": 8}


def _refused(diagnostics):
    from ._errors import AttnkitError
    return AttnkitError(diagnostics)


# Host allocations below this size skip the MemAvailable check (a read of
# /proc/meminfo, ~10 us a call): one that fails anyway is MemoryError -> AK1013.
_CHECKED_HOST_BYTES = 64 << 20


def _bytes(shape, dtype):
    nbytes = _ITEM_BYTES.get(dtype, 8)
    for s in shape:
        nbytes *= int(s)
    return nbytes


def require_host_bytes(what, nbytes):
    """AK1013 (AttnkitError) when `nbytes` of host memory for `what` are more than the host has
    available: checked before a framework's allocator fails with its own error."""
    refused = _native.check_host_allocation(what, min(nbytes, 2**63 - 1))
    if refused:
        raise _refused(refused)


def empty(like, shape, dtype, name, fill=None):
    """An array `name` of `shape` and attnkit dtype `dtype` in `like`'s framework and device,
    uninitialised or filled with `fill`. Large host allocations are checked against the memory
    available first (AK1013), and a framework's own out-of-memory error becomes AK1013 (AK6001
    on a GPU)."""
    what = lambda: f"the output '{name}' {tuple(int(s) for s in shape)}"  # noqa: E731 (only for messages)
    fw = framework(like)
    if device_kind(like, fw) == "cpu":
        nbytes = _bytes(shape, dtype)
        if nbytes >= _CHECKED_HOST_BYTES:
            require_host_bytes(what(), nbytes)
    try:
        a = _allocate(fw, like, shape, dtype, name)
        if fill is not None:
            a[...] = fill
        return a
    except MemoryError:
        raise _refused([_native.host_allocation_failed(what(), min(_bytes(shape, dtype), 2**63 - 1))]) from None
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
        if "out of memory" not in str(e).lower():
            raise
        raise _refused([_native.diagnose("AK6001", {"call": f"allocating {what()} ({_bytes(shape, dtype)} bytes)",
                                                    "error": str(e).splitlines()[0]})]) from None


_NUMPY_DTYPES = {"fp32": "float32", "fp16": "float16", "uint8": "uint8", "int32": "int32", "fp64": "float64"}
_TORCH_DTYPES = {}  # filled on the first torch allocation (importing torch here would load it for numpy users)


def _allocate(fw, like, shape, dtype, name):
    if fw == "torch":
        torch = _torch_module()
        if not _TORCH_DTYPES:
            _TORCH_DTYPES.update({"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
                                  "uint8": torch.uint8, "int32": torch.int32, "fp64": torch.float64})
        return torch.empty(shape, dtype=_TORCH_DTYPES[dtype], device=like.device)
    if fw == "cupy":
        import cupy
        return cupy.empty(shape, dtype=_NUMPY_DTYPES[dtype])
    import numpy
    if dtype == "bf16":
        raise _refused([_native.diagnose("AK1104", {"name": name, "dtype": "bf16 (the result of these inputs)",
                                                    "expected": "a dtype numpy has: pass float32 or float16 numpy "
                                                                "arrays, or torch tensors for bf16"})])
    return numpy.empty(shape, dtype=_NUMPY_DTYPES[dtype])


def like(reference, array):
    """A host numpy `array` as an array of `reference`'s framework and device (a copy when it moves)."""
    fw = framework(reference)
    if fw == "torch":
        return _torch_module().from_numpy(array).to(reference.device)
    if fw == "cupy":
        import cupy
        return cupy.asarray(array)
    return array


def native(x):
    """`x` as the native layer takes it: a torch tensor as the DLPack capsule of its data,
    made directly (torch's own __dlpack__ costs ~6 us a tensor in Python, the capsule
    0.7 us: 2026-12-02, H200 host); anything else (and a tensor that needs autograd, which
    __dlpack__ refuses) as itself."""
    if x is None or framework(x) != "torch" or x.requires_grad:
        return x
    try:
        return _torch_module()._C._to_dlpack(x)
    except BufferError:  # a device DLPack cannot name (meta): no memory to read
        raise _refused([_native.diagnose("AK1105", {"name": "a tensor argument", "device": str(x.device),
                                                    "expected": "host (cpu) or cuda memory"})]) from None
    except (AttributeError, RuntimeError, TypeError):  # a torch without it, or a tensor it does not export
        return x


def current_stream(x):
    """The CUDA stream handle the caller's framework queues work on (0 = default / CPU)."""
    fw = framework(x)
    if fw == "torch" and x.is_cuda:
        torch = _torch_module()
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # ~0.3 us; torch.cuda.current_stream ~7 us
        if raw is not None:
            return raw(x.get_device())
        return torch.cuda.current_stream(x.device).cuda_stream
    if fw == "cupy":
        import cupy
        return cupy.cuda.get_current_stream().ptr
    return 0
