"""The plots of a run (matplotlib, Agg backend): dispatch bars and scaling curves."""

from __future__ import annotations

import os
from typing import Any

from . import dispatch, fields, large, variants
from ._harness import Results, fmt_us

_COLORS = {"ours": "#d62728", "anchor": "#1f77b4", "baseline": "#7f7f7f"}


def plots(results: Results, out_dir: str) -> list[str]:
    """Draw the PNGs; return their paths (none, with a note, without matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        results.note("matplotlib is not installed: no plots (pip install -e '.[bench]')")
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    groups = [(g, t) for g, t in ((dispatch.DISPATCH, "1. jitted method call, cache hit"),
                                  (dispatch.METHOD_PYTREE, "2. bound method as a pytree"))
              if results.select(g)]
    if groups:
        heights = [max(1.5, 0.42 * len(results.select(g)) + 0.8) for g, _ in groups]
        fig, axes = plt.subplots(len(groups), 1, figsize=(8, sum(heights) + 0.5),
                                 gridspec_kw={"height_ratios": heights}, squeeze=False)
        for ax, (g, title) in zip(axes[:, 0], groups, strict=True):
            rows = sorted(results.select(g), key=lambda r: -r.us)
            ax.barh([r.name for r in rows], [r.us for r in rows],
                    color=[_COLORS[r.kind] for r in rows])
            for i, r in enumerate(rows):
                ax.text(r.us, i, f" {fmt_us(r.us)}", va="center", fontsize=8)
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("µs per call (lower is better)")
            ax.set_xlim(0, max(r.us for r in rows) * 1.18)
            ax.tick_params(axis="y", labelsize=8)
        from matplotlib.patches import Patch

        # Above the bars, not over them: inside an axis it would hide a bar's value.
        fig.legend(handles=[Patch(color=c, label=k) for k, c in (
            ("staticfield", _COLORS["ours"]), ("other libraries", _COLORS["anchor"]),
            ("plain JAX", _COLORS["baseline"]))], fontsize=8, loc="upper center", ncol=3,
            frameon=False)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
        written.append(_save(fig, out_dir, "dispatch.png", plt))

    if results.select(variants.VARIANTS):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        _curves(ax, results, variants.VARIANTS, cfg_params=results.config.variants)
        _log_y(ax)
        ax.set_xlabel("cached static variants")
        ax.set_ylabel("µs per call, slowest cached variant")
        ax.set_title("3. cache-hit cost against cached variants", fontsize=10)
        fig.tight_layout()
        written.append(_save(fig, out_dir, "variants.png", plt))

    ops = [op for op in (fields.FLATTEN, fields.UNFLATTEN, fields.CONSTRUCTION) if results.select(op)]
    if ops:
        # One panel under another, each as wide as the page: side by side they were
        # a third of the page width each, too small to read.
        # One legend for all panels, above them: beside each panel it took a third
        # of the width from the curves.
        fig, axes = plt.subplots(len(ops), 1, figsize=(8, 3.2 * len(ops) + 0.6), squeeze=False)
        handles: dict[str, Any] = {}
        for ax, op in zip(axes[:, 0], ops, strict=True):
            _curves(ax, results, op, cfg_params=results.config.field_counts, legend=False)
            _log_y(ax)
            ax.set_xlabel("fields")
            ax.set_ylabel("µs per call")
            ax.set_title(f"4. {op}", fontsize=10)
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(label, handle)
        fig.legend(handles=list(handles.values()), labels=list(handles), fontsize=9,
                   loc="upper center", ncol=3, frameon=False)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / fig.get_figheight()))
        written.append(_save(fig, out_dir, "fields.png", plt))

    if results.select(large.LARGE):
        written.append(_large(results, out_dir, plt))
    return written


_OURS_MARKERS = ("o", "s", "^", "v")
_ANCHOR_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22"]
# One colour per library in every plot.
_LIBRARY_COLORS = (("register_dataclass", "#1f77b4"), ("flax", "#ff7f0e"), ("eqx", "#2ca02c"),
                   ("equinox", "#2ca02c"), ("jax_dataclasses", "#9467bd"))
# And one marker per library, so curves that coincide (equal figures) still show
# each library's points, one shape over another.
_LIBRARY_MARKERS = (("register_dataclass", "s"), ("flax", "^"), ("eqx", "D"), ("equinox", "D"),
                    ("jax_dataclasses", "v"))


def _large(results: Results, out_dir: str, plt: Any) -> str:
    """Case 15: µs per hit against leaves (log-log), and below it the contenders within 3x
    of the flat tuple as a ratio to it, where their curves would lie on top of each other."""
    from matplotlib.ticker import FuncFormatter

    counts = tuple(sorted({int(r.param) for r in results.select(large.LARGE)}))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 8.5), gridspec_kw={"height_ratios": (3, 2)})
    _curves(top, results, large.LARGE, cfg_params=counts, legend=False)
    _log_y(top)
    top.set_ylabel("µs per cache hit")
    top.set_title("15. a cache hit against the model's leaves (log-log)", fontsize=10)
    top.legend(fontsize=8, loc="upper left")
    near = {}
    for r in results.select(large.LARGE):
        floor = results.get(large.LARGE, r.param, large.FLAT)
        near.setdefault(r.name, []).append((int(r.param), r.us / floor if floor else None))
    for name, pts in near.items():
        if all(ratio is not None and ratio < 3 for _, ratio in pts):
            line = next(l for l in top.get_lines() if l.get_label() == name)
            bottom.plot(*zip(*sorted(pts)), label=name, color=line.get_color(), marker=line.get_marker(),
                        linestyle=line.get_linestyle(), markerfacecolor=line.get_markerfacecolor())
    bottom.set_xscale("log")
    bottom.set_ylabel(f"× {large.FLAT}")
    bottom.set_title("the same, as a ratio to the flat tuple (contenders within 3×)", fontsize=10)
    bottom.grid(True, which="both", alpha=0.3)
    for ax in (top, bottom):
        ax.set_xticks(list(counts))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k" if v >= 1000 else f"{v:g}"))
        ax.set_xlabel("array leaves in the model")
    fig.tight_layout()
    return _save(fig, out_dir, "large.png", plt)


def _curves(ax: Any, results: Results, group: str, cfg_params: tuple[int, ...],
            legend: bool = True) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    names: dict[str, str] = {}
    for r in results.select(group):
        names.setdefault(r.name, r.kind)
    spare_colors = iter(_ANCHOR_COLORS[4:] * 3)
    for name, kind in names.items():
        pts = [(p, results.get(group, p, name)) for p in cfg_params]
        pts = [(p, us) for p, us in pts if us is not None]
        # Several of ours, or of the baselines, in one plot (case 15): a marker each.
        nth = sum(k == kind for k in list(names.values())[:list(names).index(name)])
        if kind == "ours":
            style = {"color": _COLORS["ours"], "linewidth": 2.5, "zorder": 3,
                     "marker": _OURS_MARKERS[nth % len(_OURS_MARKERS)],
                     "markerfacecolor": None if nth == 0 else "none"}
        elif kind == "baseline":
            style = {"color": _COLORS["baseline"], "linestyle": ("--", ":")[nth % 2],
                     "marker": ("x", "+")[nth % 2], "markersize": 8}
        else:
            color = next((c for lib, c in _LIBRARY_COLORS if lib in name), None)
            marker = next((m for lib, m in _LIBRARY_MARKERS if lib in name), "o")
            style = {"color": color or next(spare_colors), "marker": marker, "markerfacecolor": "none"}
        ax.plot([p for p, _ in pts], [us for _, us in pts], label=name, **style)
    ax.set_xscale("log")
    ax.set_xticks(list(cfg_params))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="both", alpha=0.3)
    if legend:
        ax.legend(fontsize=9)


def _log_y(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _save(fig: Any, out_dir: str, name: str, plt: Any) -> str:
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
