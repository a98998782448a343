"""Sequence parallelism: ring attention, Ulysses and USP (ring x Ulysses) across ranks.

    import attnkit.dist as akd
    comm = akd.from_torch()                  # an existing torch.distributed NCCL group (GPU tensors)
    comm = akd.from_mpi4py(MPI.COMM_WORLD)   # or an mpi4py communicator (CPU arrays)
    comm = akd.mpi_world()                   # or MPI itself, under mpirun
    q_mine = akd.shard(q, comm.rank, ring_degree=2, ulysses_degree=2, causal=True)   # [b, s, h, d] -> this rank's tokens
    out = akd.attention(q_mine, k_mine, v_mine, comm, ring_degree=2, ulysses_degree=2, causal=True)

Every rank calls attention() together with its own shard (what shard() cuts);
the result is this rank's rows of the whole attention. A refusal on one rank is
raised on every rank (AK5009 on the others) before any data moves. Rank r is
ring rank r // ulysses_degree, Ulysses rank r % ulysses_degree: keep a Ulysses
group on one node. Joint attention (flux): replicated_tokens leading text
tokens of every sequence are on every rank, whole.
"""
import attnkit
from . import _arrays
from ._attnkit import Communicator
from ._attnkit import dist_mpi_from_handle as _mpi_from_handle
from ._attnkit import dist_mpi_world as _mpi_world
from ._attnkit import dist_nccl_communicator as _nccl_communicator
from ._attnkit import dist_nccl_unique_id as _nccl_unique_id
from ._attnkit import dist_plan as _dist_plan
from ._attnkit import dist_rank_tokens as _rank_tokens
from ._attnkit import dist_sum as _sum
from ._attnkit import make_problem as _make_problem
from ._errors import AttnkitError

__all__ = ["Communicator", "mpi_world", "from_mpi4py", "from_torch", "shard", "attention"]

_plans = {}


def mpi_world():
    """MPI_COMM_WORLD (MPI is initialised if the program has not done it)."""
    return _mpi_world()


def from_mpi4py(comm):
    """An attnkit communicator over an mpi4py communicator (duplicated: yours stays yours).
    attnkit and mpi4py must use the same MPI library."""
    from mpi4py import MPI
    return _mpi_from_handle(int(MPI._handleof(comm)))


def from_torch(group=None, device=None):
    """An NCCL communicator for the ranks of an existing torch.distributed process group:
    rank 0 of the group makes the NCCL unique id and torch broadcasts it. One GPU per rank
    (`device`, default the current CUDA device)."""
    import torch
    import torch.distributed as td
    rank, size = td.get_rank(group), td.get_world_size(group)
    unique_id = [_nccl_unique_id() if rank == 0 else None]
    source = td.get_global_rank(group, 0) if group is not None else 0
    td.broadcast_object_list(unique_id, src=source, group=group)
    device = torch.cuda.current_device() if device is None else int(device)
    return _nccl_communicator(unique_id[0], rank, size, device)


def shard(x, rank, *, ring_degree=1, ulysses_degree=1, causal=False, replicated_tokens=0, seq_dim=1):
    """This rank's tokens of a whole [batch, seq, heads, dim] array (any framework): the
    replicated text, then the rank's split tokens in order (zigzag ring chunks when causal)."""
    attnkit._require_array(x, "x")
    rank, ring_degree, ulysses_degree, replicated_tokens, seq_dim = (attnkit._integer(value, name) for value, name in (
        (rank, "rank"), (ring_degree, "ring_degree"), (ulysses_degree, "ulysses_degree"),
        (replicated_tokens, "replicated_tokens"), (seq_dim, "seq_dim")))
    causal = attnkit._flag(causal, "causal")
    if not -len(x.shape) <= seq_dim < len(x.shape):
        raise attnkit._error("AK1014", name="seq_dim", expected=f"a dim of x's {len(x.shape)}", value=seq_dim,
                             type="int")
    if replicated_tokens < 0:
        raise attnkit._error("AK5008", what=f"replicated_tokens={replicated_tokens}",
                             reason="it counts the leading text tokens every rank holds: 0 or more")
    n = int(x.shape[seq_dim]) - replicated_tokens  # negative (more replicated than there are): the native refusal
    ranges = [(0, replicated_tokens)] if replicated_tokens else []
    ranges += [(replicated_tokens + s, length) for s, length in _rank_tokens(n, ring_degree, ulysses_degree, causal, rank)]

    def take(start, length):
        index = [slice(None)] * len(x.shape)
        index[seq_dim] = slice(start, start + length)
        return x[tuple(index)]
    parts = [take(s, length) for s, length in ranges]
    if _arrays.framework(x) == "torch":
        import torch
        return torch.cat(parts, dim=seq_dim).contiguous()
    import numpy
    return numpy.ascontiguousarray(numpy.concatenate(parts, axis=seq_dim))


def attention(q, k, v, comm, *, ring_degree=1, ulysses_degree=1, causal=False, window_size=(-1, -1), softcap=0.0,
              softmax_scale=None, sinks=None, return_lse=False, replicated_tokens=0, backend="auto"):
    """This rank's rows of attention over sequences split across the ranks of `comm`.
    q, k, v: [batch, local_seq, heads, dim], this rank's shard (see shard()); the whole
    sequence length is the sum over ranks. backend: the inner backend (auto: the platform's
    first that runs the problem, and returns the LSE under ring attention)."""
    if not isinstance(comm, Communicator):
        raise attnkit._error("AK1014", name="comm", expected="an attnkit.dist.Communicator (mpi_world(), from_mpi4py(), "
                             "from_torch())", value=attnkit._shown(comm), type=type(comm).__name__)
    b, sq_local, hq, _ = attnkit._shape(q, 4, "q", "bshd")
    _, sk_local, hkv, _ = attnkit._shape(k, 4, "k", "bshd")
    dv = attnkit._shape(v, 4, "v", "bshd")[-1]
    dtype, device = _arrays.dtype_name(q), _arrays.device_kind(q)
    causal, return_lse, backend = attnkit._flag(causal, "causal"), attnkit._flag(return_lse, "return_lse"), \
        attnkit._backend_name(backend)
    ring_degree, ulysses_degree, replicated_tokens = (attnkit._integer(x, name) for x, name in (
        (ring_degree, "ring_degree"), (ulysses_degree, "ulysses_degree"), (replicated_tokens, "replicated_tokens")))
    left, right, softcap, softmax_scale = attnkit._options(window_size, softcap, softmax_scale)
    key = (id(comm), b, sq_local, sk_local, hq, hkv, int(q.shape[-1]), dv, dtype, bool(causal), left, right, softcap,
           softmax_scale, sinks is not None, bool(return_lse), ring_degree, ulysses_degree, replicated_tokens,
           backend, device)
    entry = _plans.get(key)
    if entry is None:
        # The whole lengths: the text once, plus every rank's split tokens.
        seqlen_q = replicated_tokens + _sum(comm, sq_local - replicated_tokens)
        seqlen_k = replicated_tokens + _sum(comm, sk_local - replicated_tokens)
        problem = _make_problem("bshd", b, seqlen_q, seqlen_k, hq, hkv, int(q.shape[-1]), dv, dtype, bool(causal),
                                (left, right), softcap, softmax_scale, sinks is not None, False, bool(return_lse), None, None,
                                None)
        device_index = q.device.index if _arrays.framework(q) == "torch" and q.is_cuda else 0
        plan = _dist_plan(problem, ring_degree, ulysses_degree, replicated_tokens, backend, device, device_index or 0,
                          comm)
        entry = _plans[key] = (plan, comm)  # comm held too, so id(comm) stays its own
    plan = entry[0]
    out = _arrays.empty(q, (b, sq_local, hq, dv), plan.out_dtype, "out")
    lse = _arrays.empty(q, (b, hq, sq_local), "fp32", "lse") if return_lse else None
    workspace = _arrays.empty(q, (plan.workspace_bytes,), "uint8", "workspace") if plan.workspace_bytes else None
    refused = plan.run(q, k, v, out, lse, sinks, None, None, None, None, None, None, None, workspace,
                       _arrays.current_stream(q))
    if refused:
        raise AttnkitError(refused)
    return (out, lse) if return_lse else out
