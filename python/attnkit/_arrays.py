"""Framework-neutral helpers: allocate outputs in the caller's framework and
find the stream its work is queued on. Inputs cross into C++ through DLPack."""

_DTYPE_NAMES = {
    "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
    "int8": "int8", "uint8": "uint8", "int32": "int32",
    "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2",
}


def framework(x):
    """'torch', 'numpy', 'cupy' or the array's module name."""
    module = type(x).__module__.split(".")[0]
    return module


def dtype_name(x):
    """attnkit's name for the array's element type ('bf16', 'fp32', ...)."""
    name = str(x.dtype).replace("torch.", "")
    return _DTYPE_NAMES.get(name, name)


def device_kind(x):
    if framework(x) == "torch":
        return "cuda" if x.is_cuda else "cpu"
    if framework(x) == "cupy":
        return "cuda"
    return "cpu"


_ITEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "uint8": 1, "int32": 4, "fp64": 8}


def _refused(diagnostics):
    from ._errors import AttnkitError
    return AttnkitError(diagnostics)


def empty(like, shape, dtype, name, fill=None):
    """An array `name` of `shape` and attnkit dtype `dtype` in `like`'s framework and device,
    uninitialised or filled with `fill`. Host memory is checked before allocating (AK1013),
    and a framework's own out-of-memory error becomes AK1013 (AK6001 on a GPU)."""
    from ._attnkit import check_host_allocation, diagnose, host_allocation_failed
    nbytes = _ITEM_BYTES.get(dtype, 8)
    for s in shape:
        nbytes *= int(s)
    what = f"the output '{name}' {tuple(int(s) for s in shape)}"
    if device_kind(like) == "cpu":
        refused = check_host_allocation(what, min(nbytes, 2**63 - 1))
        if refused:
            raise _refused(refused)
    try:
        a = _allocate(like, shape, dtype, name)
        if fill is not None:
            a[...] = fill
        return a
    except MemoryError:
        raise _refused([host_allocation_failed(what, min(nbytes, 2**63 - 1))]) from None
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
        if "out of memory" not in str(e).lower():
            raise
        raise _refused([diagnose("AK6001", {"call": f"allocating {what} ({nbytes} bytes)",
                                            "error": str(e).splitlines()[0]})]) from None


def _allocate(like, shape, dtype, name):
    fw = framework(like)
    if fw == "torch":
        import torch
        torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
                       "uint8": torch.uint8, "int32": torch.int32, "fp64": torch.float64}[dtype]
        return torch.empty(shape, dtype=torch_dtype, device=like.device)
    if fw == "cupy":
        import cupy
        return cupy.empty(shape, dtype={"fp32": "float32", "fp16": "float16", "uint8": "uint8",
                                        "int32": "int32", "fp64": "float64"}[dtype])
    import numpy
    if dtype == "bf16":
        from ._attnkit import diagnose
        raise _refused([diagnose("AK1104", {"name": name, "dtype": "bf16 (the result of these inputs)",
                                            "expected": "a dtype numpy has: pass float32 or float16 numpy arrays, "
                                                        "or torch tensors for bf16"})])
    return numpy.empty(shape, dtype={"fp32": "float32", "fp16": "float16", "uint8": "uint8",
                                     "int32": "int32", "fp64": "float64"}[dtype])


def like(reference, array):
    """A host numpy `array` as an array of `reference`'s framework and device (a copy when it moves)."""
    fw = framework(reference)
    if fw == "torch":
        import torch
        return torch.from_numpy(array).to(reference.device)
    if fw == "cupy":
        import cupy
        return cupy.asarray(array)
    return array


def current_stream(x):
    """The CUDA stream handle the caller's framework queues work on (0 = default / CPU)."""
    fw = framework(x)
    if fw == "torch" and x.is_cuda:
        import torch
        return torch.cuda.current_stream(x.device).cuda_stream
    if fw == "cupy":
        import cupy
        return cupy.cuda.get_current_stream().ptr
    return 0
