"""Arrays whose last byte is followed by a PROT_NONE page: a native read past
their end is a segfault that kills the test run instead of passing unseen."""
import ctypes
import mmap

import numpy as np

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_PROT_NONE = 0
_keep = []  # the mappings outlive the arrays that view them


def guarded(values, dtype):
    """A copy of `values` as `dtype` ending right before a guard page."""
    a = np.asarray(values).astype(dtype)
    page = mmap.PAGESIZE
    pages = (a.nbytes + page - 1) // page + 1
    m = mmap.mmap(-1, pages * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    if _libc.mprotect(base + (pages - 1) * page, page, _PROT_NONE) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")
    _keep.append(m)
    start = (pages - 1) * page - a.nbytes
    out = np.frombuffer(m, dtype=np.uint8, count=a.nbytes, offset=start).view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_NORESERVE = 0x4000  # Linux; Python's mmap module lacks it before 3.13


class SparseRegion:
    """`nbytes` of anonymous MAP_NORESERVE memory as a float32 array: pages cost
    nothing until written, so tensors can have offsets past 2^31 elements."""

    def __init__(self, nbytes):
        self.nbytes = nbytes
        self.addr = _libc.mmap(None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE,
                               mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
        if self.addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        self.floats = np.frombuffer((ctypes.c_char * nbytes).from_address(self.addr), dtype=np.float32)

    def close(self):
        self.floats = None
        _libc.munmap(self.addr, self.nbytes)
