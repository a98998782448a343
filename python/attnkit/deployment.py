"""Deployments: the selection that `attnkit check` makes is the one that runs.

    dep = attnkit.Deployment(model="wan", platform="cpu", dtype="fp32",
                             component_attention_backends="text_encoder=reference")
    self0 = dep.layer("transformer", "self", 0)     # holds its Decision and plans
    out = self0(q, k, v)                             # numpy, torch or cupy, [batch, seq, heads, dim]
    with dep.request(attention_backend_override="cpu_flash", step=12):
        out = self0(q, k, v)                         # the request's backend, in switchable layers

Creating a Deployment runs the whole selection (the engine flags of `attnkit
check`, as keywords) on this machine and raises AttnkitError with the same
diagnostics `check` reports. A layer never re-decides, and plans each call
shape once; a request is prepared (checked and planned, nothing changes when
it is refused) and then applied.
"""
import contextlib
import itertools
import json
import weakref

from ._attnkit import Deployment as _NativeDeployment
from ._text import utf8

_layer_ids = itertools.count()
# Layers by id, for the torch custom ops (attnkit.torch), which can carry an int but not an object.
_layers = weakref.WeakValueDictionary()


def engine_args(model, platform, flags):
    """Engine flags as `attnkit check` takes them, from keywords with the engine's names
    (attention_backend="fa" -> --attention-backend fa; True -> a bare switch; a dict, e.g.
    skip_softmax_params or attention_backend_config, -> JSON)."""
    args = ["--model", str(model)] + (["--platform", str(platform)] if platform else [])
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, dict):
            args += [flag, _json(value, flag)]
        elif value is not False and value is not None:  # 0 is a value (ring_degree=0 is refused, not dropped)
            args += [flag, str(value)]
    return [utf8(a) for a in args]


def _json(value, flag):
    """A dict flag value as JSON, or AK3107 for one JSON cannot hold (a set, a tuple key, a cycle)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError) as e:
        from . import _error
        raise _error("AK3107", detail=f"{flag}: {e}") from None


def _config_text(params):
    """skip_softmax_params as --skip-softmax-params takes them: a dict becomes JSON; a string
    (JSON, k=v pairs or a file path) passes as written; None is none."""
    if params is None:
        return ""
    return _json(params, "skip_softmax_params") if isinstance(params, dict) else str(params)


def _name(value, name):
    """A component, role or backend name as the native layer takes it (a str), or AK1014."""
    from . import _error, _shown
    if not isinstance(value, str):
        raise _error("AK1014", name=name, expected="a str", value=_shown(value), type=type(value).__name__)
    return utf8(value)


class Layer:
    """One attention layer of a Deployment: (component, role, index). Call it like
    attnkit.attention; .varlen and .with_kvcache mirror attention_varlen and
    attention_with_kvcache. `causal=None` uses the mask the profile declares for the role."""

    def __init__(self, native):
        self._native = native
        self._calls = {}  # call shape -> the native layer bound to that Problem
        self.id = next(_layer_ids)
        _layers[self.id] = self

    component = property(lambda self: self._native.component)
    role = property(lambda self: self._native.role)
    index = property(lambda self: self._native.index)
    switchable = property(lambda self: self._native.switchable, doc="whether per-request overrides switch it")
    backend = property(lambda self: self._native.backend, doc="the backend in force (after an applied request)")
    decision = property(lambda self: self._native.decision, doc="the Decision in force, as `check` prints it")
    causal = property(lambda self: self._native.causal, doc="whether the profile declares the role causal")
    planned_shapes = property(lambda self: self._native.planned_shapes,
                              doc="how many call shapes the backend in force has planned")

    def _bind(self, problem):
        return self._native.bind(problem)

    def _causal(self, causal):
        return self.causal if causal is None else causal  # attnkit._run refuses a non-bool (AK1014)

    def __call__(self, q, k, v, *, causal=None, window_size=(-1, -1), softcap=0.0, softmax_scale=None, sinks=None,
                 return_lse=False, video_grid=None, gate=None):
        """Like attnkit.attention(); video_grid=(frames, height, width) for the sparse video backends,
        gate (float32 [batch, seqlen, heads]) for the gated ones (a checkpoint that provides the
        gate's weights needs it: AK2118)."""
        from . import _attention
        return _attention(q, k, v, causal=self._causal(causal), window_size=window_size, softcap=softcap,
                          softmax_scale=softmax_scale, sinks=sinks, return_lse=return_lse, backend="auto", layer=self,
                          video_grid=video_grid, gate=gate)

    def varlen(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=None,
               window_size=(-1, -1), softcap=0.0, softmax_scale=None, sinks=None, return_lse=False):
        from . import _attention_varlen
        return _attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                 causal=self._causal(causal), window_size=window_size, softcap=softcap,
                                 softmax_scale=softmax_scale, sinks=sinks, return_lse=return_lse, backend="auto",
                                 layer=self)

    def with_kvcache(self, q, k_cache, v_cache, cache_seqlens, block_table, *, causal=None, window_size=(-1, -1),
                     softcap=0.0, softmax_scale=None, sinks=None, return_lse=False):
        from . import _attention_with_kvcache
        return _attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, causal=self._causal(causal),
                                       window_size=window_size, softcap=softcap, softmax_scale=softmax_scale,
                                       sinks=sinks, return_lse=return_lse, backend="auto", layer=self)

    def __repr__(self):
        d = self.decision
        return (f"attnkit.Layer({self.component}.{self.role}[{self.index}]: {d['backend']} "
                f"decided by {d['decided_by']})")


class Deployment:
    """A model profile (model=NAME or PATH.yaml), the engine flags (keywords with the
    engine's names: attention_backend, component_attention_backends, dtype, ring_degree,
    enable_torch_compile, attention_backend_override, skip_softmax_params, ...) and this
    machine (platform=None, "cpu" or "cuda"). Raises AttnkitError like `attnkit check`."""

    def __init__(self, model, platform=None, **engine_flags):
        self._native = _NativeDeployment.create(engine_args(model, platform, engine_flags))
        self._layers = {}

    @property
    def selection(self):
        """The deployment's own decisions and warnings: {"ok", "platform", "selections", "diagnostics"}."""
        return self._native.selection

    platform = property(lambda self: self._native.platform)
    device = property(lambda self: self._native.device, doc="'cpu' or 'cuda': where its layers' arrays live")

    def layer(self, component, role, index=0):
        """Layer `index` of (component, role); the same object for the same arguments."""
        from . import _integer
        key = (_name(component, "component"), _name(role, "role"), _integer(index, "index"))  # 1.7 is not layer 1
        if key not in self._layers:
            self._layers[key] = Layer(self._native.layer(*key))
        return self._layers[key]

    def layers(self):
        """The layers made so far, in the order they were made."""
        return list(self._layers.values())

    def audit(self):
        """After the model is built: the flag requests that controlled none of its layers
        (AK3008, AK3009), as diagnostics dicts; empty when every request decided a layer."""
        return self._native.audit()

    @contextlib.contextmanager
    def request(self, attention_backend_override=None, skip_softmax_params=None, step=None):
        """One request (e.g. a denoising step): within the block, switchable layers run
        `attention_backend_override` ("none" or None: the deployment's own backends), the
        backends see `step` and `skip_softmax_params` ({"threshold_scale_factor": f,
        "start_step": s}, JSON or k=v). Prepared on entry (AttnkitError and nothing
        changed when refused); the previous request is back in force on exit."""
        from . import _error, _integer
        override = "" if attention_backend_override is None else _name(attention_backend_override,
                                                                       "attention_backend_override")
        number = -1 if step is None else _integer(step, "step")
        if step is not None and number < 0:
            raise _error("AK1014", name="step", expected="None or a denoising step >= 0", value=number, type="int")
        prepared = self._native.prepare(override, _config_text(skip_softmax_params), number)
        previous = self._native.active()
        self._native.apply(prepared)
        try:
            yield self
        finally:
            self._native.apply(previous)

    def __repr__(self):
        return f"attnkit.Deployment({self.selection['platform']}, {len(self._layers)} layers)"
