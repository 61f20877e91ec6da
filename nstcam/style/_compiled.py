"""The compiled step: features and losses as one ``torch.compile``d function, cached per engine.

On CUDA the eager step is launch-bound (the GPU idles most of a step at 512 px): compiled with
``mode="reduce-overhead"`` (CUDA graphs), a step is a few graph replays. The compiled function
reads the same VGG16_bn ReLU outputs as the hook manager, by index, in a plain loop over the
modules up to the deepest one, on a hook-free twin of the network (same weights): hooks that
concurrent calls register on the shared network would otherwise enter the traced code and its
guards, and a hook that stops the pass with an exception does not trace. It
returns the unweighted losses, so style, content and TV weights change without recompiling;
targets are arguments, so a new request does not recompile either. Shapes are static: each new
image size compiles once (``StyleTransfer.warmup`` does it ahead), then hits the cache.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from nstcam._capture import adopt_cudagraph_trees, capture_turn, raised, tf32_in_use
from nstcam.hooks import float64_copy, twin
from nstcam.style._optimize import step_directions, unmasked_terms, weighted
from nstcam.style._plan import Plan
from nstcam.style._runtime import Runtime
from nstcam.style._selfcheck import Verdict, check_step, float32_error, tolerance, widened
from nstcam.style._targets import Targets
from nstcam.style.losses import style_loss_named
from nstcam.style.vgg import layer_index, vgg_layers

__all__ = [
    "MAX_FAILURES",
    "Compiled",
    "compile_stats",
    "compiled_loss",
    "recompile_limit",
    "sqrt_method",
    "tap_features",
]

logger = logging.getLogger(__name__)

Step = Callable[[torch.Tensor], torch.Tensor]
Weigh = Callable[[torch.Tensor], torch.Tensor]


def tap_features(net: nn.Sequential, x: torch.Tensor, taps: dict[int, str]) -> dict[str, torch.Tensor]:
    """Runs ``net`` up to the deepest tapped index and returns the tapped outputs by name."""
    out: dict[str, torch.Tensor] = {}
    last = max(taps)
    for i in range(last + 1):
        x = net[i](x)
        if i in taps:
            out[taps[i]] = x
    return out


_CODES = itertools.count(1)


def _own_code(fn: Callable) -> Callable:
    """``fn`` with a code object of its own. torch.compile keeps its compiled graphs (and its
    recompile limit) per code object, and a closure defined in one place shares one code object
    however many times it is made: two engines' steps would share compiled graphs, and on CUDA the
    graphs recorded for one engine's static buffers would serve the other's, from its thread."""
    n = next(_CODES)
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{n}", co_qualname=f"{fn.__qualname__}_{n}")
    own = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
    own.__kwdefaults__ = fn.__kwdefaults__
    return own


Terms = Callable[..., torch.Tensor]
"""``terms(net, x, content, style, directions)``: the step's (3, N) unweighted losses on ``net``."""


def _terms(
    rt: Runtime,
    content_layers: tuple[str, ...],
    style_layers: tuple[tuple[str, float], ...],
    kind: str = "gram",
) -> tuple[Terms, int]:
    """The step of one layer set of one engine on a given network, and the deepest layer it reads."""
    table = vgg_layers(rt.net)
    names = dict.fromkeys([n for n, _ in style_layers] + list(content_layers))
    taps = {layer_index(n, table): n for n in names}
    styles = dict(style_layers)
    contents = list(content_layers)
    sqrt = sqrt_method(rt.device)

    def terms(net: nn.Module, x: torch.Tensor, content: dict, style: dict, directions: dict | None):
        xn = rt.preprocess.normalize(x)
        if rt.channels_last:
            xn = xn.contiguous(memory_format=torch.channels_last)
        with torch.autocast(rt.device.type, dtype=torch.bfloat16, enabled=rt.amp):
            feats = tap_features(net, xn, taps)
        return torch.stack(unmasked_terms(feats, x, content, style, contents, styles, kind, directions, sqrt))

    return terms, max(taps)


def _build(rt: Runtime, *key) -> Callable:
    """The compiled step of layer set ``key`` (content layers, style layers, loss) of one engine:
    ``step(x, content, style, directions)`` -> its (3, N) unweighted content, style and tv losses."""
    terms, _ = _terms(rt, *key)
    net = twin(rt.net)  # same weights, its own (always empty) hook tables: stable guards

    def step(x: torch.Tensor, content: dict, style: dict, directions: dict | None = None) -> torch.Tensor:
        return terms(net, x, content, style, directions)

    return torch.compile(_own_code(step), dynamic=False, **compile_options(rt.device))


def _exact(rt: Runtime, *key) -> Callable:
    """The step of layer set ``key`` uncompiled and in float64, with :func:`_build`'s arguments: the
    self-check's reference. Its float64 copy of the network (up to the deepest layer read) is made at
    each call and dropped after it: a key calls it once."""
    terms, deepest = _terms(rt, *key)

    def exact(x: torch.Tensor, content: dict, style: dict, directions: dict | None = None) -> torch.Tensor:
        net64 = float64_copy(nn.Sequential(*list(rt.net)[: deepest + 1]))
        return terms(net64, x.double(), *_float64((content, style, directions)))

    return exact


def _float64(obj: object) -> object:
    """``obj`` (tensors in dicts, lists and tuples) with every floating tensor in float64."""
    if isinstance(obj, torch.Tensor):
        return obj.double() if obj.is_floating_point() else obj
    if isinstance(obj, dict):
        return {k: _float64(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_float64(v) for v in obj)
    return obj


_SIMDLEN = {"DEFAULT": 0, "AVX2": 256, "AVX512": 512}
"""Inductor's C++ vector width for the kernels ATen runs on this CPU (``ATEN_CPU_CAPABILITY``)."""


def compile_options(device: torch.device) -> dict:
    """``torch.compile``'s mode or options for the step on ``device``: CUDA graphs on CUDA; on a CPU
    whose ATen kernels were chosen by ``ATEN_CPU_CAPABILITY`` (default, avx2, avx512), inductor's
    vector width named outright. Inductor reads that variable too, and with torch 2.14.1 on an
    AVX-512 CPU its own reading breaks: ``default`` emits code that does not compile (``'at::vec' has not been
    declared``), ``avx2`` a max-pool backward that reads garbage indices (``index
    -18014394218708992 is out of bounds``); the same widths given as ``cpp.simdlen`` compile and
    agree with eager (tests/test_selfcheck.py). Elsewhere inductor picks, as by default."""
    if device.type == "cuda":
        return {"mode": "reduce-overhead"}
    capability = torch.backends.cpu.get_cpu_capability()
    if os.environ.get("ATEN_CPU_CAPABILITY") and capability in _SIMDLEN:
        return {"options": {"cpp.simdlen": _SIMDLEN[capability]}}
    return {}


@dataclass
class Compiled:
    """One layer set's compiled step (``fn``) and its float64 reference (``exact``: same arguments),
    the network's Parameter objects it was built over, and the shapes admitted to compile (each one
    of torch.compile's cache entries)."""

    fn: Callable
    exact: Callable
    parameters: tuple
    shapes: set = field(default_factory=set)

    def same_parameters(self, net: nn.Module) -> bool:
        """Whether ``net`` still holds the Parameter objects the step's twin was built over. A
        Parameter replaced on the engine's network (``st.net[0].weight = nn.Parameter(...)``) is
        seen by the eager step and the hooks, never by the twin: the step is then compiled again."""
        now = tuple(net.parameters())
        if len(now) != len(self.parameters):
            return False
        return all(a is b for a, b in zip(now, self.parameters, strict=True))


def _forget(rt: Runtime, key: tuple) -> None:
    """Drops the compiled step of layer set ``key`` and what is known of its shapes (under rt.lock)."""
    rt.compiled.pop(key, None)
    for known in (rt.compiled_shapes, rt.shape_failures):
        for shape_key in [k for k in known if k[0] == key]:
            del known[shape_key]


def sqrt_method(device: torch.device) -> str:
    """The W2 loss' square root in the compiled step: Newton-Schulz on CUDA (matrix products only;
    eigh checks its result on the host, which a CUDA graph cannot capture), eigh elsewhere."""
    return "newton-schulz" if device.type == "cuda" else "eigh"


MAX_FAILURES = 3
"""Failures of the compiled step at one shape before that shape runs eagerly for good."""


def _shapes(obj: object) -> tuple:
    """The shapes of every tensor in ``obj`` (dicts, lists and tuples of tensors), in order."""
    if isinstance(obj, torch.Tensor):
        return (tuple(obj.shape),)
    if isinstance(obj, dict):
        return tuple(s for k in sorted(obj) for s in _shapes(obj[k]))
    if isinstance(obj, (list, tuple)):
        return tuple(s for v in obj for s in _shapes(v))
    return ()


def recompile_limit() -> int:
    """Entries torch.compile keeps per code object before it silently runs the frame uncompiled
    (``torch._dynamo.config.recompile_limit``, 8 by default). Each engine's layer set has a code
    object of its own (:func:`_own_code`), so the limit counts that step's sizes only."""
    config = torch._dynamo.config
    return int(getattr(config, "recompile_limit", None) or getattr(config, "cache_size_limit", 8))


def _admit(rt: Runtime, compiled: Compiled, shape: tuple) -> bool:
    """Whether ``shape`` (the image's and the targets' shapes) may compile: within torch.compile's
    recompile limit for this step (see above)."""
    with rt.lock:
        if shape in compiled.shapes:
            return True
        if len(compiled.shapes) >= recompile_limit():
            return False
        compiled.shapes.add(shape)
        return True


def _torch_counts() -> tuple[int, int]:
    """torch.compile's own counters: graphs compiled and CUDA-graph skips, process-wide."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"]), int(counters["inductor"]["cudagraph_skips"])


def _compiled_for(rt: Runtime, key: tuple) -> Compiled | None:
    """The engine's compiled step for layer set ``key``, built on first use and again after a
    Parameter of the network was replaced; None where no compiler works (that layer set runs eagerly)."""
    with rt.lock:
        compiled = rt.compiled.get(key)
        if compiled and not compiled.same_parameters(rt.net):
            logger.warning(
                "the engine's network has new parameters since its step was compiled: compiling it again"
            )
            _forget(rt, key)
            compiled = None
        if compiled is None:
            try:
                fn, exact = _build(rt, *key), _exact(rt, *key)
                compiled = rt.compiled[key] = Compiled(fn, exact, tuple(rt.net.parameters()))
            except Exception as e:  # noqa: BLE001 - no compiler at all: this layer set runs eagerly
                logger.warning("compiled step failed (%s); running eagerly", raised(e))
                rt.compile_failures.add()
                compiled = rt.compiled[key] = False
    return compiled or None


def _self_check(
    rt: Runtime, shape_key: tuple, run: Step, weigh: Weigh, eager: Step, exact: Step, x: torch.Tensor
) -> bool:
    """A new key's first calls, under the process-wide capture lock: two checks against eager
    (``_selfcheck.py``: the compiled function's first call and its first replay), recorded in
    ``rt.checks``, with torch.compile's own record of them (a frame it left uncompiled, CUDA graphs
    it skipped), under the tolerance of what float32 promises at this key (``exact``: the step in
    float64). Returns whether the key runs compiled; a key that fails (a wrong value, or the
    compiled step raised) runs eagerly from now on, said once."""
    tol = tolerance(rt.amp, style_loss_named(shape_key[0][2]).check, tf32=tf32_in_use(x.device))
    if not rt.amp:  # bf16 autocast has its own, far looser tolerance
        error = float32_error(eager, exact, x)
        tol = widened(tol, error)
        logger.debug("eager float32 error at %s: %s; the check's tolerance: %s", shape_key[1], error, tol)
    verdict = Verdict(0.0, 1.0)
    with capture_turn():
        graphs, skips = _torch_counts()
        for _ in range(2):  # call 1, then the first replay (CUDA graphs record on call 2)
            try:
                verdict = check_step(run, weigh, eager, x, tol)
            except Exception as e:  # a compiled step that raises is not one to serve (logged below)
                rt.compile_failures.add()
                verdict = Verdict(float("inf"), -1.0, raised(e))
                logger.debug("the compiled step raised during its self-check", exc_info=True)
            rt.checks.add(verdict.error)
            if not verdict.ok:
                break
        graphs_now, skips_now = _torch_counts()
    if graphs_now == graphs:
        rt.torch_fallbacks.add()
        logger.info("torch.compile compiled no graph for %s: torch runs that step uncompiled", shape_key[1])
    if skips_now > skips:
        rt.graph_skips.add(skips_now - skips)
        logger.warning("torch.compile skipped CUDA graphs at %s: its steps run without them", shape_key[1])
    with rt.lock:
        rt.compiled_shapes[shape_key] = verdict.ok
    if not verdict.ok:
        rt.checks.mismatch()
        logger.warning(
            "compiled step disagrees with eager at %s (%s); that size runs eagerly from now on",
            shape_key[1],
            verdict.why,
        )
    return verdict.ok


def compiled_loss(
    rt: Runtime,
    targets: Targets,
    plan: Plan,
    eager_step: Callable[[torch.Tensor, dict | None], torch.Tensor],
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The step's (4, N) weighted losses through the engine's compiled function for these layers.

    The first step at each new key (layer set and every shape the traced step reads) checks the
    compiled function against eager (:func:`_self_check`); that step's result is then the compiled
    one, or the eager one where the check failed (and the key runs eagerly from then on). Every
    later call is guarded: a failure (running out of memory while recording a graph, anything) is
    logged and counted, and that step runs eagerly (``eager_step(x, directions)``: the same sliced
    directions) with the same result; after :data:`MAX_FAILURES` failures at a shape, that shape
    runs eagerly for good. A new shape beyond torch.compile's recompile limit runs eagerly too, said
    once, rather than silently uncompiled inside torch. The backward pass runs later, in the
    optimiser: a failure there is handed to ``loss.recover``, which counts it likewise and gives the
    step's losses eagerly, and the step runs again eagerly.
    """
    key = (tuple(plan.content_layers), tuple(plan.style_layers.items()), plan.style_loss)
    if rt.device.type == "cuda" and adopt_cudagraph_trees():  # this torch's trees are the importer's
        logger.debug("torch.compile's CUDA-graph trees set up on thread %s", threading.current_thread().name)
    compiled = _compiled_for(rt, key)
    if compiled is None:
        return lambda x: eager_step(x, step_directions(targets, plan, x.device))

    def failed(shape_key: tuple, e: BaseException) -> None:
        rt.compile_failures.add()
        with rt.lock:
            n = rt.shape_failures[shape_key] = rt.shape_failures.get(shape_key, 0) + 1
            final = n >= MAX_FAILURES
            if final:
                rt.compiled_shapes[shape_key] = False
        logger.warning(
            "compiled step failed (%s); running eagerly%s",
            raised(e),
            f" at {shape_key[1]} from now on" if final else " for this step",
        )
        logger.debug("the compiled step's failure", exc_info=e)

    last: dict = {}  # this step's sliced directions, for recover
    target_shapes = _shapes((targets.content, targets.style))  # the sliced loss': the style image's size

    def weigh(terms: torch.Tensor) -> torch.Tensor:
        return weighted((terms[0], terms[1], terms[2]), plan)

    def loss(x: torch.Tensor) -> torch.Tensor:
        directions = last["directions"] = step_directions(targets, plan, x.device)  # once per step

        def eager(x: torch.Tensor) -> torch.Tensor:
            return eager_step(x, directions)

        def exact(x: torch.Tensor) -> torch.Tensor:
            return weigh(compiled.exact(x, targets.content, targets.style, directions))

        def run(x: torch.Tensor) -> torch.Tensor:
            terms = compiled.fn(x, targets.content, targets.style, directions)
            return terms.clone()  # a CUDA graph's output buffer: the next replay overwrites it

        shape_key = (key, tuple(x.shape), target_shapes)  # every shape the traced graph depends on
        state = rt.compiled_shapes.get(shape_key)  # None: not compiled yet
        if state is False:
            return eager(x)
        if state is None:
            if not _admit(rt, compiled, shape_key[1:]):
                with rt.lock:
                    rt.compiled_shapes[shape_key] = False
                logger.warning(
                    "compiled step: torch.compile's recompile limit (%d sizes per step) is reached; "
                    "%s runs eagerly. Warm the sizes you serve first (StyleTransfer.warmup) or raise "
                    "torch._dynamo.config.recompile_limit",
                    recompile_limit(),
                    shape_key[1],
                )
                return eager(x)
            if not _self_check(rt, shape_key, run, weigh, eager, exact, x):
                return eager(x)
        try:
            terms = run(x)
        except Exception as e:  # noqa: BLE001 - after the check too: eager for this step, counted
            failed(shape_key, e)
            return eager(x)
        return weigh(terms)

    def recover(x: torch.Tensor, e: BaseException) -> torch.Tensor:
        """After the compiled step's backward pass failed: counted as a failure at this shape (three
        make it eager for good), and this step's losses computed eagerly."""
        failed((key, tuple(x.shape), target_shapes), e)
        return eager_step(x, last.get("directions"))

    loss.recover = recover
    loss.new_block = targets.new_block  # L-BFGS with the sliced loss: new directions between blocks
    return loss


def compile_stats(rt: Runtime) -> dict[str, int | float]:
    """The compiled step's record:

    - ``shapes`` compiled and passing their self-check, ``eager_shapes`` given up on (a failed
      self-check, repeated failures, or past the recompile limit), ``failures`` (each a step run
      eagerly instead, logged);
    - the self-check (``_selfcheck.py``): ``checked`` comparisons with eager, ``mismatches`` (keys
      found wrong, each then eager), ``max_rel_err`` (the largest relative error of any comparison);
    - ``recompiles`` (sizes compiled beyond each layer set's first), and torch.compile's own record
      of them: ``torch_fallbacks`` (new keys it compiled no graph for) and ``graph_skips`` (CUDA
      graphs it skipped).

    Benchmarks and ``gpu_report.py`` use it to tell a compiled run from one that silently ran eagerly."""
    shape_states = list(rt.compiled_shapes.values())
    records = [c for c in rt.compiled.values() if c]
    return {
        "shapes": sum(v is True for v in shape_states),
        "eager_shapes": sum(v is False for v in shape_states),
        "failures": rt.compile_failures.value,
        **rt.checks.as_dict(),
        "recompiles": sum(max(len(c.shapes) - 1, 0) for c in records),
        "torch_fallbacks": rt.torch_fallbacks.value,
        "graph_skips": rt.graph_skips.value,
    }
