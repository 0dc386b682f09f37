"""Framework variants of a workload: build the model, optimizer and data, and wrap one step.

Runs inside a benchmark worker process (`loom.bench.worker`), which imports
only the framework it measures. A `Runner` steps through the batches, can
force pending work to finish (`sync`), and reports framework-specific facts
(`info`): for loom, the traced graph's planned peak memory and the kernel
builds.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

import numpy as np

from loom.bench.workloads import Workload, api, init_state, load_initial_state


class Runner:
    """One framework's step of one workload, cycling through pre-converted batches.

    Parameters
    ----------
    step : callable(*batch) -> output
    batches : list of tuples of framework tensors
    sync : callable(output) -> None
        Blocks until the output (and everything before it) is computed.
    value : callable(output) -> float
        The sum of the output as a Python float (a cross-framework check).
    info : callable() -> dict, optional
    """

    def __init__(self, step: Callable, batches: list, sync: Callable, value: Callable,
                 info: Callable[[], dict] | None = None, settle: Callable[[], None] | None = None):
        self.step_fn = step
        self.batches = batches
        self.sync = sync
        self.value = value
        self._info = info
        self._settle = settle
        self.count = 0

    def step(self):
        batch = self.batches[self.count % len(self.batches)]
        self.count += 1
        return self.step_fn(*batch)

    def run(self, k: int):
        """`k` steps, then wait for all their work; returns the last output."""
        out = None
        for _ in range(k):
            out = self.step()
        self.sync(out)
        return out

    def settle(self) -> None:
        """Wait for background work started by the warm-up (kernel builds)."""
        if self._settle is not None:
            self._settle()

    def info(self) -> dict:
        return self._info() if self._info is not None else {}


def framework_module(framework: str) -> str:
    """The importable module a framework variant needs."""
    return {"loom": "loom", "loom-function": "loom", "torch": "torch", "torch-compile": "torch",
            "jax": "jax"}[framework]


def build(workload: Workload, framework: str, options: dict[str, Any]) -> Runner:
    """The `Runner` for `framework`'s variant of `workload`.

    `options`: ``seed``, ``threads``, ``loom_backend`` ("c" or "reference",
    for loom.function), ``loom_eager_backend`` ("tiered", "auto", "compiled" or "reference"; absent or
    None: loom's default).
    """
    reason = workload.supports(framework)
    if reason:
        raise RuntimeError(reason)
    seed = int(options.get("seed", 0))
    rng = np.random.default_rng(seed)
    batches = workload.batches(rng)
    if framework == "jax":
        return _jax(workload, batches, seed)
    a = api(framework)
    a.lib.manual_seed(seed)
    model = workload.model(a)
    load_initial_state(a, model, seed)
    model.train(workload.train)
    data = [tuple(a.tensor(x) for x in b) for b in batches]
    if workload.train:
        opt = workload.optimizer(a, model.parameters())

        def step(*batch):
            opt.zero_grad()
            loss = workload.loss(a, model, *batch)
            loss.backward()
            opt.step()
            return loss
    else:
        def step(*batch):
            with a.lib.no_grad():
                return workload.loss(a, model, *batch)
    if a.name == "torch":
        return _torch(a, framework, step, data)
    return _loom(a, framework, step, data, options)


def _torch(a, framework: str, step: Callable, data: list) -> Runner:
    torch = a.lib
    if framework == "torch-compile":
        step = torch.compile(step)

    def value(out) -> float:
        return float(out.detach().double().sum())
    # CPU tensors are computed when the call returns; reading a value is the barrier.
    return Runner(step, data, sync=value, value=value)


def _loom(a, framework: str, step: Callable, data: list, options: dict) -> Runner:
    import loom
    import loom.codegen

    fn = step
    if framework == "loom-function":
        fn = loom.function(step, backend=options.get("loom_backend", "c"))
    else:
        if options.get("loom_eager_backend"):
            loom.set_backend(options["loom_eager_backend"])

    def value(out) -> float:
        return float(np.asarray(out.detach().numpy(), dtype=np.float64).sum())

    def info() -> dict:
        facts: dict[str, Any] = {"codegen": loom.codegen.stats(), "eager_backend": loom.get_backend()}
        if framework == "loom-function":
            facts.update(_function_facts(loom, fn))
        else:
            from loom.compiler import eager as compiled
            facts["eager_compiles"] = compiled.stats["compiles"]
        return facts

    def settle() -> None:
        if framework != "loom-function":
            from loom.compiler import eager as compiled
            compiled.wait_tiered()  # Plans the tiered eager backend queued during the warm-up.
        else:
            for entry in fn._cache.values():
                wait = getattr(entry.exe, "wait", None)
                if wait is not None:
                    wait()
    return Runner(fn, data, sync=value, value=value, info=info, settle=settle)


def _function_facts(loom, fn) -> dict:
    """Traces, kernels and the memory plan of a `loom.function`'s specialisations."""
    facts: dict[str, Any] = {"backend": fn.backend, "traces": fn.trace_count, "graphs": []}
    for entry in fn._cache.values():
        plan = getattr(entry.exe, "plan", None)
        source = "executable"
        if plan is None:
            # The reference backend runs the unoptimised graph; plan it as the C backend would.
            _, plan = loom.compiler.optimize(entry.graph, 3)
            source = "optimize(level=3)"
        g = {"nodes": len(list(entry.graph)), "fused_kernels": len(getattr(entry.exe, "kernels", []) or []),
             "plan_source": source}
        if plan is not None:
            g.update(planned_peak_bytes=int(plan.arena_bytes), lower_bound_bytes=int(plan.lower_bound),
                     unplanned_bytes=int(plan.unplanned_bytes))
        facts["graphs"].append(g)
    if facts["graphs"]:
        facts["planned_peak_bytes"] = max(g.get("planned_peak_bytes", 0) for g in facts["graphs"])
    return facts


def _jax(workload: Workload, batches: list, seed: int) -> Runner:
    jax = importlib.import_module("jax")
    jnp = importlib.import_module("jax.numpy")
    shapes = {k: (tuple(s), np.float32) for k, s in workload.param_shapes().items()}
    params = {k: jnp.asarray(v) for k, v in init_state(shapes, seed).items()}
    init, jstep = workload.jax_step(jax, jnp)
    box = [init(params)]
    data = [tuple(jnp.asarray(x) for x in b) for b in batches]

    def step(*batch):
        box[0], out = jstep(box[0], *batch)
        return out

    def sync(out) -> None:
        jax.block_until_ready((box[0], out))

    def value(out) -> float:
        return float(np.asarray(out, dtype=np.float64).sum())
    return Runner(step, data, sync=sync, value=value)
