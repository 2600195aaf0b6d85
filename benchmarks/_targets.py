"""The speed targets of the design, checked against a run's figures.

Each target is a ratio of two measured figures and a bound. A target whose
figures are missing (a case was skipped) is ``SKIP`` with the reason, never
``PASS``.
"""

from __future__ import annotations

import dataclasses

from . import agree, auto, buckets, deps, dispatch, fields, hits, large, misses, nested, restart, variants, warmup, watch
from ._harness import Results


@dataclasses.dataclass
class Target:
    label: str
    bound: float
    at_most: bool               # True: ratio <= bound; False: ratio >= bound
    ratio: float | None = None
    detail: str = ""

    @property
    def status(self) -> str:
        if self.ratio is None:
            return "SKIP"
        ok = self.ratio <= self.bound if self.at_most else self.ratio >= self.bound
        return "PASS" if ok else "FAIL"

    @property
    def ratio_text(self) -> str:
        """Three decimals, so that a ratio just past its bound does not print as the bound."""
        return "n/a" if self.ratio is None else f"{self.ratio:.3f}"

    @property
    def bound_text(self) -> str:
        return f"{'≤' if self.at_most else '≥'}{self.bound:g}"

    def line(self) -> str:
        got = self.ratio_text
        detail = f"  {self.detail}" if self.detail else ""
        return f"{self.status}  {self.label}: {got} (target {self.bound_text}){detail}"


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def _why(*pairs: tuple[str, float | None]) -> str:
    missing = [name for name, value in pairs if value is None]
    return f"not measured: {', '.join(missing)}" if missing else ""


def _restart(results: Results) -> list[Target]:
    """Case 10. On a CPU (the design's floor: XLA's loading of the executable and its first
    run dominate, and JAX's cache pays both): the store's own work as a share of the time
    to first result, and that time against JAX's cache. Elsewhere: the ratios."""
    g, out = results.get, []
    parts = results.extra.get(restart.PARTS, {})
    cpu = str(parts.get("device", "cpu")).startswith("cpu")
    for model in (*restart.MODELS, restart.JOB):
        warm = g(restart.RESTART, model, restart.PCACHE)
        goals = ((restart.STORE, 0.15, 1.0), (restart.SOURCE, 0.10, None)) if cpu else (
            (restart.STORE, None, 0.85), (restart.SOURCE, None, 0.5))
        for name, share, ratio in goals:
            ours = g(restart.RESTART, model, name)
            if share is not None:
                own = parts.get(model, {}).get(name, {}).get(restart.PART_NAMES[3])
                out.append(Target(f"fresh process, first results ({model}): {name}: the store's own work / "
                                  "the time to first result", share, True, _ratio(own, ours),
                                  _why(("the store's own work", own), (name, ours))))
            if ratio is not None:
                out.append(Target(f"fresh process, first results ({model}): {name} / JAX persistent cache", ratio,
                                  True, _ratio(ours, warm), _why((name, ours), (restart.PCACHE, warm))))
    return out


def evaluate(results: Results) -> list[Target]:
    cfg = results.config
    g = results.get
    out = []

    for form, bound in ((hits.OBJ_METHOD, 1.03), (hits.CLS_METHOD, 1.03), (hits.INSTANCE, 1.03),
                        (hits.ARRAYS, 1.03), (hits.DEPS, 1.03), (hits.STATIC, 1.10),
                        (hits.STATIC_METHOD, 1.10), (hits.STATIC_T, 1.10), (hits.DEPS_STATIC, 1.10)):
        ours, plain = g(hits.HITS, form, hits.OURS), g(hits.HITS, form, hits.JAX)
        out.append(Target(f"hit {form} / {hits.JAX} (median of processes)", bound, True, _ratio(ours, plain),
                          _why((hits.OURS, ours), (hits.JAX, plain))))
    many, one = g(hits.HITS, hits.MANY, hits.OURS), g(hits.HITS, hits.ONE, hits.OURS)
    out.append(Target(f"hit on the last of {hits.VARIANTS} static variants / 1 (jit_method)", 1.05, True,
                      _ratio(many, one), _why((hits.MANY, many), (hits.ONE, one))))

    ours = g(dispatch.DISPATCH, "", dispatch.JIT_METHOD)
    raw = g(dispatch.DISPATCH, "", dispatch.RAW)
    out.append(Target("jit_method hit / raw jax.jit", 1.10, True, _ratio(ours, raw),
                      _why((dispatch.JIT_METHOD, ours), (dispatch.RAW, raw))))

    free = g(dispatch.DISPATCH, "", dispatch.SF_JIT)
    out.append(Target("sf.jit hit / raw jax.jit", 1.10, True, _ratio(free, raw),
                      _why((dispatch.SF_JIT, free), (dispatch.RAW, raw))))

    plain = g(dispatch.DISPATCH, "", dispatch.SF_JIT_ARRAYS)
    raw_plain = g(dispatch.DISPATCH, "", dispatch.RAW_ARRAYS)
    out.append(Target("sf.jit hit, plain arrays / raw jax.jit", 1.05, True, _ratio(plain, raw_plain),
                      _why((dispatch.SF_JIT_ARRAYS, plain), (dispatch.RAW_ARRAYS, raw_plain))))

    eqx = g(dispatch.DISPATCH, "", dispatch.EQX_FILTER)
    out.append(Target("equinox filter_jit / ours", 5.0, False, _ratio(eqx, ours),
                      _why((dispatch.EQX_FILTER, eqx), (dispatch.JIT_METHOD, ours))))

    hi = max(cfg.variants)
    v_hi = g(variants.VARIANTS, hi, dispatch.JIT_METHOD)
    v_one = g(variants.ONE_VARIANT, hi, dispatch.JIT_METHOD)
    out.append(Target(f"{hi} static variants / 1 (ours)", 1.3, True, _ratio(v_hi, v_one),
                      _why((dispatch.JIT_METHOD, v_hi))))

    k = cfg.representative_fields if cfg.representative_fields in cfg.field_counts else max(cfg.field_counts)
    for op, label, bound, den_name in (
        (fields.FLATTEN, "flatten / native", 1.15, fields.NATIVE),
        (fields.UNFLATTEN, "unflatten / native", 0.8, fields.NATIVE),
        (fields.CONSTRUCTION, "construction / plain frozen dataclass", 2.0, fields.PLAIN),
    ):
        num, den = g(op, k, fields.OURS), g(op, k, den_name)
        out.append(Target(f"{label} ({k} fields)", bound, True, _ratio(num, den),
                          _why((fields.OURS, num), (den_name, den))))

    ours_step = g(nested.NESTED, nested.LAYERS, nested.OURS)
    best, best_name = nested.best_anchor(results)
    out.append(Target(f"{nested.LAYERS}-layer model step / best of flax.struct, equinox", 1.05, True,
                      _ratio(ours_step, best),
                      _why((nested.OURS, ours_step), ("flax.struct or equinox", best))
                      or f"(best anchor: {best_name})"))
    for group, label, bound in ((watch.HIT, "jax.jit hit inside sf.watch / without", 1.02),
                                (watch.MISS, "jax.jit compile inside sf.watch / without", 1.05)):
        on, off = g(group, "", watch.ON), g(group, "", watch.OFF)
        out.append(Target(label, bound, True, _ratio(on, off), _why((watch.ON, on), (watch.OFF, off))))

    for ours_name, raw_name in ((misses.OURS_SHAPE, misses.RAW_SHAPE), (misses.OURS_STATIC, misses.RAW_STATIC)):
        num, den = g(misses.MISSES, "", ours_name), g(misses.MISSES, "", raw_name)
        out.append(Target(f"miss (trace + compile): {ours_name} / {raw_name}", 1.05, True,
                          _ratio(num, den), _why((ours_name, num), (raw_name, den))))

    read, raw_deps = g(deps.HIT, "", deps.READ), g(deps.HIT, "", deps.RAW)
    out.append(Target('deps="read" hit / raw jax.jit', 1.10, True, _ratio(read, raw_deps),
                      _why((deps.READ, read), (deps.RAW, raw_deps))))
    reuse = g(deps.REUSE, "", deps.READ_REUSE)
    out.append(Target('deps="read": µs to reuse a program for a new instance', 100.0, True, reuse,
                      _why((deps.READ_REUSE, reuse))))
    sweep = results.extra.get(deps.COMPILES, {})
    compiles = sweep.get(deps.READ)
    out.append(Target(f'deps="read": compiles over {sweep.get("instances", "N")} unread static values',
                      1.0, True, None if compiles is None else float(compiles),
                      _why((deps.READ, compiles))
                      or f"(deps=\"all\": {sweep.get(deps.ALL)}, flax.struct: {sweep.get(deps.FLAX, 'n/a')})"))
    layered = results.extra.get(deps.NESTED_COMPILES, {})
    compiles = layered.get(deps.READ)
    out.append(Target(f'deps="read": compiles over {layered.get("instances", "N")} models differing '
                      "in an unread layer static", 1.0, True, None if compiles is None else float(compiles),
                      _why((deps.READ, compiles)) or f"(deps=\"all\": {layered.get(deps.ALL)})"))
    out += _restart(results)
    served = results.extra.get(buckets.COMPILES, {})
    compiles = served.get(buckets.OURS)
    out.append(Target(f"buckets: compiles of the user's function over {served.get('sizes', 'N')} batch sizes "
                      "(pow2)", 13.0, True, None if compiles is None else float(compiles),
                      _why((buckets.OURS, compiles)) or f"(jax.jit: {served.get(buckets.RAW)})"))
    # "a plain jitted call plus one pad and one slice": plain JAX running the three, each on the
    # one before's output, as a bucketed hit must; the three measured apart are each only
    # dispatched (none waits for another), which no chain of them can cost: given beside it
    hit, chain = g(buckets.HIT, "", buckets.OURS_DEV), g(buckets.HIT, "", buckets.CHAIN)
    raw_hit, pad, cut = (g(buckets.HIT, "", n) for n in (buckets.RAW_HIT, buckets.PAD, buckets.SLICE))
    apart = None if None in (raw_hit, pad, cut) else raw_hit + pad + cut  # type: ignore[operator]
    out.append(Target("buckets: device-batch hit / jax.jit's own pad, hit of the bucket and slice, chained", 1.0,
                      True, _ratio(hit, chain), _why((buckets.OURS_DEV, hit), (buckets.CHAIN, chain))
                      or ("" if apart is None or hit is None else f"(/ the three measured apart: {hit / apart:.3f})")))
    for model in (buckets.TINY, buckets.DEEP):
        for ours_name, raw_name, what in ((buckets.FIRST_OURS, buckets.FIRST_RAW, "the first call ever"),
                                          (buckets.NEXT_OURS, buckets.NEXT_RAW, "a new bucket's first call")):
            ours, raw = g(buckets.FIRST, model, ours_name), g(buckets.FIRST, model, raw_name)
            out.append(Target(f"buckets, {model}: {what} / jax.jit's first call of the bucket's shape, compiling",
                              1.3, True, _ratio(ours, raw), _why((ours_name, ours), (raw_name, raw))))
    for param in sorted({row.param for row in results.select(warmup.WARMUP)}) or ["64 layers, 8 programs"]:
        one, two = g(warmup.WARMUP, param, warmup.ONE), g(warmup.WARMUP, param, warmup.TWO)
        out.append(Target(f"sf.warmup with the records only ({param}): workers=2 / workers=1", 0.7, True,
                          _ratio(two, one), _why((warmup.TWO, two), (warmup.ONE, one))))
    on, off = g(agree.AGREE, agree.PARAM, agree.ON), g(agree.AGREE, agree.PARAM, agree.OFF)
    out.append(Target("new program spanning 2 processes: agreement check on / off", 1.05, True, _ratio(on, off),
                      _why((agree.ON, on), (agree.OFF, off))))
    for form in (deps.FRESH_PLAIN, deps.FRESH_STATIC):
        got = g(deps.FRESH_REUSE, "", form)
        out.append(Target(f"{form} (µs, median of processes)", 100.0, True, got, _why((form, got))))
    ours, theirs, plain = (g(auto.AUTO, "", n) for n in (auto.OURS, auto.EQX, auto.PLAIN))
    out.append(Target(f"static=\"auto\" hit on a Newton solve: {auto.OURS} / {auto.EQX}", 0.6, True,
                      _ratio(ours, theirs), _why((auto.OURS, ours), (auto.EQX, theirs))))
    out.append(Target(f"static=\"auto\" hit on a Newton solve: {auto.OURS} / {auto.PLAIN}", 1.3, True,
                      _ratio(ours, plain), _why((auto.OURS, ours), (auto.PLAIN, plain))))
    floor = g(large.LARGE, large.TARGET_LEAVES, large.FLAT)
    for form in (large.OBJ, large.FREE):
        got = g(large.LARGE, large.TARGET_LEAVES, form)
        out.append(Target(f"{large.TARGET_LEAVES:,}-leaf model hit: {form} / {large.FLAT}", 1.05, True,
                          _ratio(got, floor), _why((form, got), (large.FLAT, floor))))
    return out
