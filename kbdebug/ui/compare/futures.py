"""FuturePair: the future under the cursor and its counterpart, side by side, in cycles."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from kbdebug.analysis.compare import FutureFacts
from kbdebug.safe_text import escape
from kbdebug.ui.queries import short_loc

#: The facts shown, in the order a future lives them.
FACTS = ("issue", "grant", "done", "wait", "stall")


def _cell(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


class FuturePair(Widget):
    """A's and B's issue, grant, done, wait and stall of one future, and B - A."""

    COMPONENT_CLASSES = {"future-pair--title", "future-pair--better", "future-pair--worse"}

    DEFAULT_CSS = """
    FuturePair {
        height: auto;
        min-height: 5;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    FuturePair > .future-pair--title { color: $text-muted; text-style: bold; }
    FuturePair > .future-pair--better { color: $success; }
    FuturePair > .future-pair--worse { color: $error; }
    """

    pair: reactive[tuple[FutureFacts | None, FutureFacts | None] | None] = reactive(None)
    """(A's, B's) facts of the future under the cursor; None when there is none."""

    side = reactive("a")
    """The focused run, whose future it is."""

    def render(self) -> Text:
        title = self.get_component_rich_style("future-pair--title")
        out = Text(no_wrap=True, overflow="ellipsis")
        if self.pair is None or self.pair == (None, None):
            out.append(" no future at the cursor: n steps to the next tl call", title)
            return out
        a, b = self.pair
        here = a if self.side == "a" else b
        out.append(" " + self._heading(a, b, here), title)
        width = 9
        out.append("\n" + " " * 5 + "".join(f"{name:>{width}}" for name in FACTS), title)
        for label, facts in (("A", a), ("B", b)):
            out.append(f"\n {label:<4}")
            if facts is None:
                out.append(f"{'not in ' + label:>{width}}")
                continue
            values = [getattr(facts, name) for name in FACTS]
            out.append("".join(f"{_cell(v):>{width}}" for v in values))
        if a is not None and b is not None:
            out.append("\n B-A ")
            for name in FACTS:
                x, y = getattr(a, name), getattr(b, name)
                if x is None or y is None:
                    out.append(f"{'':>{width}}")
                    continue
                delta = y - x
                style = None
                if name == "stall" and delta:
                    style = self.get_component_rich_style(
                        "future-pair--better" if delta < 0 else "future-pair--worse"
                    )
                out.append(f"{delta:>+{width},}" if delta else f"{'0':>{width}}", style)
        return out

    def _heading(
        self, a: FutureFacts | None, b: FutureFacts | None, here: FutureFacts | None
    ) -> str:
        where = ""
        if here is not None:
            where = f"  {escape(here.op, 40)}"
            if here.loc is not None:
                where += f" at {escape(short_loc(here.loc), 200)}"
        names = []
        for label, facts in (("A", a), ("B", b)):
            names.append(f"{label} future {facts.future}" if facts else f"not in {label}")
        return " ↔ ".join(names) + where
