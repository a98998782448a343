"""The one timer of the GPU benchmarks (design section 6): CUDA events around
each call on the GPU, read after the round's synchronize, so timed calls queue
back to back; wall time on the CPU."""
import time

import torch


class Timer:
    """Milliseconds of one call: CUDA events on the GPU (read after the
    round's synchronize), wall time on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.pending = []

    def time(self, fn):
        if self.cuda:
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
