"""The one timer of the GPU benchmarks (design section 6): CUDA events around
each call on the GPU, read after the round's synchronize, so timed calls queue
back to back; wall time on the CPU.

On the GPU every timed call follows an L2 flush (a read of 256 MB, ~0.1 ms,
outside the events), so that each call starts from the same state whatever
ran before it, and the host's work before a call's first launch overlaps the
flush instead of landing inside the call's events. Without it, on the H200
(2026-12-02, d128 / d256 causal s512, ~0.1 ms kernels), the same cuDNN kernel
took 0.10 ms after some implementations and 0.15-0.21 ms after others, so a
point's median followed the mix of predecessors its random order dealt it.

The flush reads, and does not write: until 2026-12-07 it was a memset, which
left the whole L2 (50 MB on the H100, 60 on the H200) dirty, so the timed call
paid for writing it back to HBM as its first reads evicted it (12-15 us at
3.35-4.8 TB/s, an estimate: the two flushes have not been timed side by side).
A read leaves clean lines, which are dropped for free. Grids timed before that
date carry the write-back. AK_BENCH_FLUSH=memset brings the old flush back (to
time the two side by side), AK_BENCH_FLUSH=none drops it."""
import os
import time

import torch

_FLUSH_BYTES = 256 << 20  # 4x the H200's 60 MB L2
FLUSH = os.environ.get("AK_BENCH_FLUSH", "read")  # read | memset | none
if FLUSH not in ("read", "memset", "none"):
    raise SystemExit(f"AK_BENCH_FLUSH={FLUSH}: read, memset or none")
_flush_buffers = {}


def _flush_buffer(device):
    key = str(device)
    if key not in _flush_buffers:
        # Written once here (no read of uninitialised memory); read before every call.
        _flush_buffers[key] = torch.zeros(_FLUSH_BYTES // 8, dtype=torch.int64, device=device)
    return _flush_buffers[key]


class Timer:
    """Milliseconds of one call: CUDA events on the GPU (read after the
    round's synchronize), each call after an L2 flush unless flush_l2=False;
    wall time on the CPU."""

    def __init__(self, device, flush_l2=True):
        self.cuda = device.type == "cuda"
        self.flush = _flush_buffer(device) if self.cuda and flush_l2 and FLUSH != "none" else None
        self.pending = []

    def time(self, fn):
        if self.cuda:
            if self.flush is not None:
                if FLUSH == "read":
                    self.flush.sum()  # reads every line: L2 ends up clean (see above)
                else:
                    self.flush.zero_()
            a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            z.record()
            self.pending.append((a, z))
        else:
            t0 = time.perf_counter()
            fn()
            self.pending.append(1e3 * (time.perf_counter() - t0))

    def collect(self):
        if self.cuda:
            torch.cuda.synchronize()
            ms = [a.elapsed_time(z) for a, z in self.pending]
        else:
            ms = list(self.pending)
        self.pending = []
        return ms
