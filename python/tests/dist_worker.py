"""One rank of test_dist.py's mpirun run: every layout of the world size, on
numpy arrays, against the single-process reference; exit status 0 when all agree."""
import sys

import numpy as np

import attnkit
import attnkit.dist as akd


def main():
    comm = akd.mpi_world()
    n = comm.size
    rng = np.random.default_rng(5)
    failures = []
    for causal, text in ((True, 0), (False, 0), (False, 6)):
        q, k, v = (rng.standard_normal((2, 6 + 57, 4, 32)).astype(np.float32) for _ in range(3))
        whole = attnkit.attention(q, k, v, causal=causal, backend="reference")
        for ulysses in (u for u in range(1, n + 1) if n % u == 0 and 4 % u == 0):
            ring = n // ulysses
            layout = dict(ring_degree=ring, ulysses_degree=ulysses, causal=causal, replicated_tokens=text)
            mine = [akd.shard(x, comm.rank, **layout) for x in (q, k, v)]
            out = akd.attention(*mine, comm, **layout)
            want = akd.shard(whole, comm.rank, **layout)
            err = np.linalg.norm(out - want) / np.linalg.norm(want)
            if not err < 1e-5:
                failures.append(f"rank {comm.rank} ring {ring} ulysses {ulysses} causal {causal} text {text}: rel_l2 {err}")
    try:
        akd.attention(*(akd.shard(x, comm.rank, ring_degree=n) for x in (q, q, q)), comm, ring_degree=2 * n)
        failures.append("sp = 2 * world was accepted")
    except attnkit.AttnkitError as e:
        if e.code != "AK5007":
            failures.append(f"sp = 2 * world: {e.code}, AK5007 expected")
    print("\n".join(failures) if failures else f"rank {comm.rank}: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
