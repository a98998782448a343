"""attnkit.dist: sharding, and sequence-parallel attention under mpirun (numpy,
MPI), from mpi4py, and from a torch.distributed NCCL group (skipped without them)."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import attnkit
import attnkit.dist as akd
from attnkit._attnkit import dist_mpi_compiled, dist_nccl_compiled


@pytest.mark.parametrize("ring,ulysses,causal,text", [(2, 1, True, 0), (3, 2, True, 0), (2, 2, False, 5), (1, 4, False, 0)])
def test_shards_cover_every_token_once(ring, ulysses, causal, text):
    x = np.arange(2 * (text + 53)).reshape(2, text + 53, 1, 1).astype(np.float32)
    shards = [akd.shard(x, r, ring_degree=ring, ulysses_degree=ulysses, causal=causal, replicated_tokens=text)
              for r in range(ring * ulysses)]
    split = np.concatenate([s[:, text:] for s in shards], axis=1)
    assert sorted(split[0, :, 0, 0]) == list(x[0, text:, 0, 0])  # every split token once
    for s in shards:
        assert (s[:, :text] == x[:, :text]).all()  # the text on every rank


@pytest.mark.skipif(not dist_mpi_compiled() or shutil.which("mpirun") is None, reason="no MPI in this build")
@pytest.mark.parametrize("ranks", [2, 4])
def test_every_layout_under_mpirun(ranks):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    worker = os.path.join(os.path.dirname(__file__), "dist_worker.py")
    run = subprocess.run(["mpirun", "-np", str(ranks), "--oversubscribe", "--timeout", "120", sys.executable, worker],
                         env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr


def test_mpi4py_communicator():
    MPI = pytest.importorskip("mpi4py.MPI")
    comm = akd.from_mpi4py(MPI.COMM_WORLD)
    assert (comm.rank, comm.size) == (MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size())
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 40, 4, 32)).astype(np.float32) for _ in range(3))
    mine = [akd.shard(x, comm.rank, ring_degree=comm.size, causal=True) for x in (q, k, v)]
    out = akd.attention(*mine, comm, ring_degree=comm.size, causal=True)
    want = akd.shard(attnkit.attention(q, k, v, causal=True, backend="reference"), comm.rank, ring_degree=comm.size,
                     causal=True)
    assert np.linalg.norm(out - want) / np.linalg.norm(want) < 1e-5


def test_torch_nccl_group_at_world_size_one():
    """On one GPU: an existing torch.distributed NCCL group hands attnkit its unique id."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not dist_nccl_compiled():
        pytest.skip("needs a GPU and an attnkit build with NCCL")
    import torch.distributed as td
    created = not td.is_initialized()
    if created:
        td.init_process_group("nccl", init_method="tcp://127.0.0.1:29517", rank=0, world_size=1)
    try:
        comm = akd.from_torch()
        assert (comm.kind, comm.rank, comm.size) == ("nccl", 0, 1)
        g = torch.Generator(device="cuda").manual_seed(3)
        q, k, v = (torch.randn(2, 300, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        out = akd.attention(q, k, v, comm, causal=True)
        want = attnkit.attention(q, k, v, causal=True)
        assert (out.float() - want.float()).norm() / want.float().norm() < 1e-2
    finally:
        if created:
            td.destroy_process_group()


def test_importing_attnkit_first_leaves_torch_its_own_nccl():
    """attnkit loads NCCL at first use instead of linking it: linked to the toolkit's libnccl.so.2, it made
    a later `import torch` fail whenever torch's wheel brings a newer NCCL (undefined ncclCommResume)."""
    pytest.importorskip("torch")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-c", "import attnkit, torch; print(torch.__version__)"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
