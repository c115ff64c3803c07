"""``--plot``: end cycle (or efficiency) against one swept parameter, drawn with plotext.

One series per setting of the other swept parameters; only points that ran ok
are drawn. plotext is imported here only, when a plot is asked for.
"""

from __future__ import annotations

from typing import Any

from kbdebug.safe_text import escape
from kbdebug.sweep.grid import format_value
from kbdebug.sweep.results import Results

#: What --plot can draw, and the row field each one reads.
METRICS = {"end": ("end cycle", "end_cycle"), "efficiency": ("efficiency", "efficiency")}
#: Distinct markers, so the series stay apart without colours.
MARKERS = ("dot", "circle", "square", "diamond", "up", "down", "cross", "star", "heart", "at")
#: Series drawn at most (the legend would cover the plot past that).
MAX_SERIES = len(MARKERS)


def series(results: Results, x_key: str, metric: str) -> list[tuple[str, list[Any], list[float]]]:
    """(label, x values, y values) per setting of the other parameters, in grid order."""
    field = METRICS[metric][1]
    out: dict[tuple, tuple[list[Any], list[float]]] = {}
    for p, r in results.finished():
        y = getattr(r, field)
        if r.outcome != "ok" or y is None:
            continue
        others = tuple((k, v) for k, v in p.params if k != x_key)
        xs, ys = out.setdefault(others, ([], []))
        xs.append(p.value(x_key))
        ys.append(100 * y if metric == "efficiency" else y)
    return [
        (" ".join(f"{k}={format_value(v)}" for k, v in others) or "all", xs, ys)
        for others, (xs, ys) in out.items()
    ]


def render(
    results: Results,
    x_key: str,
    metric: str = "end",
    *,
    width: int = 80,
    height: int = 20,
    color: bool = False,
) -> str:
    """The plot as text (ANSI colours only with ``color``)."""
    import plotext as plt

    drawn = series(results, x_key, metric)
    if not drawn:
        return "(nothing to plot: no point ran ok)\n"
    axis_values = next(a.values for a in results.axes if a.key == x_key)
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in axis_values)
    position = {v: (v if numeric else i) for i, v in enumerate(axis_values)}
    fig = plt.figure
    fig.clear()
    plt.terminal.limit(False, False)
    fig.plot_size(width, height)
    note = ""
    if len(drawn) > MAX_SERIES:
        note = f"(the first {MAX_SERIES} of {len(drawn)} series)\n"
        drawn = drawn[:MAX_SERIES]
    for (label, xs, ys), marker in zip(drawn, MARKERS, strict=False):
        signal = fig.signal([position[x] for x in xs], ys, marker=marker)
        if len(drawn) > 1:
            signal.label(escape(label, 60))
        fig.draw(signal.lines())
    fig.ruler("x").ticks(
        [position[v] for v in axis_values], [escape(format_value(v), 12) for v in axis_values]
    )
    title, _ = METRICS[metric]
    unit = " (%)" if metric == "efficiency" else ""
    fig.title(escape(f"{results.scenario}: {title} vs {x_key}", width))
    fig.label(escape(x_key, 40), axis="x")
    fig.label(f"{title}{unit}", axis="y")
    # In the corner the curves usually leave empty: end cycles fall with depth (top
    # right is free), efficiencies rise (bottom right is).
    all_y = [y for _, _, ys in drawn for y in ys]
    top = metric == "end"
    fig.legend(
        x=max(position.values()),
        y=max(all_y) if top else min(all_y),
        ha="right",
        va="top" if top else "bottom",
        relative=True,
    )
    return fig.build().string(colorless=not color).rstrip("\n") + "\n" + note
