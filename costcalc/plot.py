"""Figures of the cost model (matplotlib, an optional extra: ``pip install 'costcalc[plot]'``).

``figure(what, specs, ...)`` draws one panel per model, side by side on a shared y axis:

- ``prefill``: FLOPs of a prefill against the prompt length S, per term;
- ``decode``: FLOPs of one decode step against the cached context T, per term;
- ``generate``: FLOPs of each generated token of one generation (token 1 comes out of
  the prefill, token j >= 2 from the decode step over S + j - 2 cached tokens), per
  term, with the whole generation's mean per token as a line.

With one convention the terms are stacked areas where the values span less than two
decades, and lines on log axes where they span more; with several conventions
(``causal``, ``full``, ``tiled``) each panel compares their attention and totals.
The crossovers are marked where they fall inside the range: the prefill length where
attention equals the linear layers, and T_equal (decode). ``figure`` returns what it
drew -- series, markers, axes scales -- so that a test can hold the picture to the data.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from . import calc, outputs, units
from .core.registry import WORKLOADS, workload as find
from .errors import CostcalcError
from .spec import ModelSpec
from .vocab import LABELS, TERMS

WHATS = tuple(name for name, w in WORKLOADS.items() if w.axis)   # what a figure draws: a workload with an axis
TERM_LABELS = LABELS   # one label per term, from the vocabulary
COLORS = {t.name: t.color for t in TERMS}
CONVENTION_STYLE = {"causal": "-", "full": "--", "tiled": ":"}
DECADES = 2   # a value range wider than this many decades gets a log axis


@dataclass(frozen=True)
class Figure:
    """What a figure draws: ``what`` (``WHATS``) over the x values, under the conventions, for
    a batch (``generate``: after a prompt); with ``traffic`` (precision, machine) a decode
    step's roofline time by term instead of FLOPs, the time crossover marked beside T_equal."""
    what: str
    xs: tuple[int, ...]
    conventions: tuple[str, ...] = ("causal",)
    batch: int = 1
    prompt: int = 1
    logits: str = "last"
    tile: tuple[int, int] | None = None
    traffic: tuple | None = None


@dataclass(frozen=True)
class Look:
    """How it looks: ``style`` (auto, stacked or lines), a panel's size in inches, the dpi of
    a PNG, the title (None: said from the figure)."""
    style: str = "auto"
    size: tuple[float, float] = (7.0, 4.5)
    dpi: int = 150
    title: str | None = None


@dataclass
class Drawn:
    """What a figure shows: per panel, its series and markers (for tests and captions)."""
    path: Path
    panels: list[dict[str, Any]] = field(default_factory=list)


def _pyplot():
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise CostcalcError("costcalc plot needs matplotlib: pip install 'costcalc[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"   # SVG text stays text: searchable and editable

    return plt


def _spans(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) >= 10**DECADES


def _series(spec: ModelSpec, request: Figure, convention: str) -> tuple[dict[str, list], list]:
    """Per-term FLOPs at each x, and the totals; with ``traffic`` (precision, machine), a decode
    step's roofline time per term instead."""
    xs, batch, prompt, logits, tile = list(request.xs), request.batch, request.prompt, request.logits, request.tile
    n = len(xs)
    if request.traffic is not None:
        from . import roofline
        from .evaluate import Options, Query

        times = roofline.term_times(Query(spec, "decode", Options(convention, tile=tile), *request.traffic),
                                    {"B": [batch] * n, "T": xs})
        return times, [sum(v) for v in zip(*times.values())]
    if request.what == "prefill":
        table = calc.table(spec, "prefill", convention, logits, tile, batch=[batch] * n, seq=xs)
    elif request.what == "decode":
        table = calc.table(spec, "decode", convention, "last", tile, batch=[batch] * n, context=xs)
    else:
        first = calc.table(spec, "prefill", convention, logits, tile, batch=[batch], seq=[prompt])
        later = [x for x in xs if x >= 2]
        steps = calc.table(spec, "decode", convention, "last", tile, batch=[batch] * len(later),
                           context=[prompt + x - 2 for x in later]) if later else None
        table = {}
        for key in first:
            if key.endswith("_flops"):
                table[key] = ([first[key][0]] if xs[0] == 1 else []) + (list(steps[key]) if steps else [])
    terms = {name: table[f"{name}_flops"] for name in TERM_LABELS if f"{name}_flops" in table}
    return terms, table["total_flops"]


def _markers(spec: ModelSpec, what: str, convention: str, xs: list[int], prompt: int) -> list[dict]:
    """The crossovers that fall inside the plotted range (none for DeepSeek-V4, whose crossovers are not
    solved: its keys grow by one compressed entry every R_c tokens)."""
    if convention == "tiled" or any(g.block.v4 for g in spec.groups):
        return []
    rows = {r["quantity"]: r for r in calc.crossover(spec, [convention])}
    out = []
    # never: windows or chunks keep attention below the linear layers, or there is none (a sparse layer's
    # indexer grows with the keys: its attention does reach them)
    why = "no softmax attention" if not any(g.block.attends for g in spec.groups) else "local attention"
    if what == "prefill":
        at = rows["prefill_attention_equals_linear"]["tokens"]
        if at is None:
            return [{"x": None, "label": f"attention never reaches the linear layers ({why})",
                     "convention": convention}]
        label = f"attention = linear at S = {at:,.0f}"
    else:
        t_equal = rows["decode_t_equal"]["tokens"]
        if t_equal is None:
            return [{"x": None, "label": f"T_equal: never ({why})", "convention": convention}]
        # The x axis of decode is the cached context T: the step reads T + 1 keys. Token j >= 2
        # of a generation comes from the step over S + j - 2 cached tokens (S + j - 1 keys).
        context = rows["decode_t_equal"]["context"]
        at = context if what == "decode" else t_equal - prompt + 1
        label = (f"T_equal = {t_equal:,.6g} keys, context {context:,.6g}" if what == "decode"
                 else f"T_equal = {t_equal:,.6g} keys (token {at:,.6g})")
    if xs[0] <= at <= xs[-1]:
        out.append({"x": at, "label": label, "convention": convention})
    return out


def _time_marker(spec: ModelSpec, xs: list[int], batch: int, traffic) -> list[dict]:
    """The decode context where reading the K/V cache takes as long as reading the weights."""
    from .crossover import time_root
    from .evaluate import Query

    root = time_root(Query(spec, "decode", precision=traffic[0]), batch)
    if root is None:
        return [{"x": None, "label": "K/V read time never reaches the weights' (sliding windows)",
                 "convention": "time"}]
    keys = root.value()
    if xs[0] <= keys - 1 <= xs[-1]:
        return [{"x": round(keys - 1, 2), "label": f"K/V time = weights' at {keys:,.6g} keys (batch {batch})",
                 "convention": "time"}]
    return []


def figure(what: str, specs: Sequence[ModelSpec], xs: Sequence[int], output: str | Path, **options: Any) -> Drawn:
    """``draw`` by keywords: ``options`` are the fields of ``Figure`` (conventions, batch,
    prompt, logits, tile, traffic) and of ``Look`` (style, size, dpi, title)."""
    look = {k: options.pop(k) for k in ("style", "size", "dpi", "title") if k in options}
    request = Figure(what, tuple(xs), **{**options, "conventions": tuple(options.get("conventions", ("causal",)))})
    return draw(request, specs, output, Look(**look))


def draw(request: Figure, specs: Sequence[ModelSpec], output: str | Path, look: Look = Look()) -> Drawn:
    """Draw the request for each model, a panel each (computed, then drawn), and save it
    (PNG or SVG by suffix)."""
    what, traffic, conventions = request.what, request.traffic, request.conventions
    if what not in WHATS:
        raise CostcalcError(f"plot: expected one of {', '.join(WHATS)}, got {what!r}")
    if traffic is not None and (what != "decode" or len(conventions) > 1):
        raise CostcalcError("plot: --device draws decode time by term, for one convention")
    dest = check_output(output)
    if look.style not in ("auto", "stacked", "lines"):
        raise CostcalcError(f"plot: style must be auto, stacked or lines, got {look.style!r}")
    request = replace(request, xs=tuple(sorted(set(int(x) for x in request.xs))))
    if len(request.xs) < 2:
        raise CostcalcError("plot: give at least two x values (a list or a range)")
    size, dpi = look.size, look.dpi
    columns = min(len(specs), MAX_COLUMNS)
    rows = -(-len(specs) // columns)
    pixels = (size[0] * columns * dpi, size[1] * rows * dpi)
    if not 10 <= dpi <= MAX_DPI or max(pixels) > MAX_PIXELS_SIDE:
        raise CostcalcError(f"plot: {len(specs)} panel(s) of {size[0]:g}x{size[1]:g} inches at {dpi} dpi is "
                            f"{pixels[0]:,.0f} x {pixels[1]:,.0f} pixels; at most {MAX_PIXELS_SIDE:,} a side "
                            f"and {MAX_DPI} dpi")
    plt = _pyplot()
    drawn = Drawn(Path(dest.shown))
    fig, axes = plt.subplots(rows, columns, figsize=(size[0] * columns, size[1] * rows), sharey=True,
                             squeeze=False)
    cells = [ax for row in axes for ax in row]
    for ax, spec in zip(cells, specs):
        panel = _panel(spec, request, look.style)
        _draw(ax, spec, panel, request)
        drawn.panels.append(panel)
    for ax in cells[len(specs):]:
        ax.set_visible(False)
    batch = request.batch
    for row in axes:
        row[0].set_ylabel(("time of one decode step" if traffic else
                           {"prefill": "FLOPs of the prefill", "decode": "FLOPs of one decode step",
                            "generate": "FLOPs of the token"}[what]) + (f" (batch {batch})" if batch > 1 else ""))
    said = (_time_title(traffic, batch, conventions[0], specs) if traffic
            else _title(what, batch, request.prompt, conventions))
    fig.suptitle(_plain(look.title) if look.title else said, fontsize=11)
    fig.tight_layout()
    kind = Path(dest.shown).suffix.lower().lstrip(".")
    try:
        outputs.write(dest, lambda handle: fig.savefig(handle, format=kind, dpi=dpi,
                                                       metadata={"Software": "costcalc"} if kind == "png" else None),
                      binary=True)
    finally:
        plt.close(fig)
    return drawn


MAX_DPI = 1200
MAX_COLUMNS = 3            # panels a row; more models wrap onto further rows
MAX_PIXELS_SIDE = 20_000   # a figure side beyond this is refused (memory), whatever the dpi


def check_output(output: str | Path) -> "outputs.Target":
    """The figure's destination, checked before anything is drawn: a .png or .svg name."""
    dest = outputs.target(output, "--output")
    if Path(dest.shown).suffix.lower() not in (".png", ".svg"):
        raise CostcalcError(f"plot: --output must name a .png or .svg file, got {dest.shown!r}")
    return dest


def _plain(text: str) -> str:
    """A user's text drawn as written: matplotlib reads ``$...$`` as math (a stray ``$`` in a
    preset's title was a parse error), so each ``$`` is escaped."""
    return text.replace("$", r"\$")


def _time_title(traffic, batch: int, convention: str, specs: Sequence[ModelSpec]) -> str:
    """Two lines: the device and batch, then every dtype and fraction the times depend on."""
    precision, machine = traffic
    labels = {}
    for spec in specs:
        labels.update(precision.labels(spec))
    dtypes = f"weights {labels['weight_dtype']}" + (f" (groups of {labels['group_size']})" if "group_size" in labels
                                                     else "") + f", KV {labels['kv_dtype']}, compute {labels['act_dtype']}"
    dtypes += f", {labels['routing']} routing" if "routing" in labels else ""
    if (machine.compute_efficiency, machine.memory_efficiency) != (1, 1):
        dtypes += f", efficiency {machine.compute_efficiency:g}/{machine.memory_efficiency:g}"
    return (f"Decode-step time by term on {machine.device.name}, batch {batch}, {convention}\n{dtypes}\n"
            f"time = sum over operators of max(FLOPs/peak, bytes/bandwidth)")


def _title(what: str, batch: int, prompt: int, conventions: Sequence[str]) -> str:
    head = {"prefill": "Prefill FLOPs by prompt length", "decode": "Decode-step FLOPs by cached context",
            "generate": f"FLOPs per generated token, prompt {prompt:,}"}[what]
    return f"{head} ({', '.join(conventions)}; matmul FLOPs = 2 x multiply-adds)"


def _panel(spec: ModelSpec, request: Figure, style: str) -> dict:
    """What one model's panel shows: its series (the terms and total under one convention, or
    the attention and totals of each), the style, the axes' scales and the markers."""
    what, xs, conventions = request.what, list(request.xs), list(request.conventions)
    panel: dict[str, Any] = {"preset": spec.name, "x": xs, "series": {}, "markers": []}
    totals_all: list[int] = []
    if len(conventions) == 1:
        conv = conventions[0]
        terms, totals = _series(spec, request, conv)
        totals_all = totals
        lines = style == "lines" or (style == "auto" and _spans(totals))
        panel["series"] = {**terms, "total": totals}
        panel["style"] = "lines" if lines else "stacked"
        if what == "generate":
            panel["mean_per_token"] = calc.generate(spec, request.prompt, xs[-1], request.batch, conv, request.logits,
                                                    request.tile)[-1]["total_flops"] / xs[-1]
    else:
        panel["style"] = "lines"
        for conv in conventions:
            terms, totals = _series(spec, request, conv)
            totals_all += totals
            panel["series"][f"total_{conv}"] = totals
            panel["series"][f"attention_{conv}"] = terms["attention"]
        panel["series"]["linear"] = [t - a - h for t, a, h in zip(totals, terms["attention"], terms["lm_head"])]
    log_x = xs[-1] / max(xs[0], 1) >= 10**DECADES
    log_y = panel["style"] == "lines" and _spans(totals_all)
    panel["xscale"], panel["yscale"] = ("log" if log_x else "linear"), ("log" if log_y else "linear")
    for conv in conventions:
        for marker in _markers(spec, what, conv, xs, request.prompt) + (
                _time_marker(spec, xs, request.batch, request.traffic) if request.traffic else []):
            if len(conventions) > 1:
                marker["label"] += f" ({conv})"
            panel["markers"].append(marker)
    return panel


def _draw(ax, spec: ModelSpec, panel: dict, request: Figure) -> None:
    """A panel on its axes: the series (stacked areas or lines), scales, markers, labels."""
    xs, series, conventions = panel["x"], panel["series"], request.conventions
    if len(conventions) > 1:
        for conv in conventions:
            ax.plot(xs, series[f"total_{conv}"], color="black", linestyle=CONVENTION_STYLE[conv],
                    label=f"total, {conv}")
            ax.plot(xs, series[f"attention_{conv}"], color=COLORS["attention"], linestyle=CONVENTION_STYLE[conv],
                    label=f"attention, {conv}")
        ax.plot(xs, series["linear"], color=COLORS["ffn"], label="linear layers (any convention)")
    else:
        terms = {name: values for name, values in series.items() if name != "total"}
        if panel["style"] == "lines":
            for name, values in terms.items():
                ax.plot(xs, values, color=COLORS[name], label=TERM_LABELS[name])
            ax.plot(xs, series["total"], color="black", linewidth=1.6, label="total")
        else:
            ax.stackplot(xs, *terms.values(), colors=[COLORS[n] for n in terms],
                         labels=[TERM_LABELS[n] for n in terms], alpha=0.9)
        if "mean_per_token" in panel:
            ax.axhline(panel["mean_per_token"], color="grey", linestyle="--", linewidth=1,
                       label=f"mean per token over {xs[-1]:,} tokens")
    if panel["xscale"] == "log":
        ax.set_xscale("log", base=2 if _powers_of_two(xs) else 10)
    if panel["yscale"] == "log":
        ax.set_yscale("log")
    for marker in panel["markers"]:
        if marker["x"] is None:
            ax.text(0.98, 0.03, marker["label"], transform=ax.transAxes, ha="right", va="bottom",
                    fontsize=8, color="dimgrey")
            continue
        ax.axvline(marker["x"], color="dimgrey", linestyle="-.", linewidth=1)
        ax.annotate(marker["label"], xy=(marker["x"], 0.97), xycoords=("data", "axes fraction"),
                    xytext=(-4, 0), textcoords="offset points", rotation=90, va="top", ha="right",
                    fontsize=8, color="dimgrey")
    from matplotlib.ticker import FuncFormatter

    show = units.seconds if request.traffic else units.flops
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: show(v, short=True) if v > 0 else "0"))
    ax.set_title(_plain(spec.title or spec.name), fontsize=10)
    ax.set_xlabel(find(request.what).axis)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def _powers_of_two(xs: Sequence[int]) -> bool:
    return all(x > 0 and x & (x - 1) == 0 for x in xs)
