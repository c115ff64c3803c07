"""How panes style themselves: a component class's own style, a pane's title."""

from __future__ import annotations

from rich.style import Style
from textual.content import Content
from textual.widget import Widget

from kbdebug.safe_text import escape


def component_style(widget: Widget, name: str) -> Style:
    """The colours and text style that component class ``name`` sets, and nothing else.

    A full component style carries the widget's background, which would paint
    over a highlighted row; this keeps only what the class sets itself. Colours
    are taken from the full style, where Textual has blended them: a partial
    style drops a colour's alpha, so ``$text-muted`` would come out brighter
    than plain text instead of dimmer.
    """
    style = widget.get_component_rich_style(name, partial=True)
    if style.color is None and style.bgcolor is None:
        return style
    full = widget.get_component_rich_style(name)
    return style + Style(
        color=full.color if style.color is not None else None,
        bgcolor=full.bgcolor if style.bgcolor is not None else None,
    )


#: What marks the focused pane's title (as well as reverse video): seen without colour.
FOCUS_MARK = "▶"


def pane_title(number: int | None, text: str, focused: bool) -> Content:
    """A pane's border title or tab label: ``▶[2] attention.py`` in bold reverse when
    focused, ``[2] attention.py`` otherwise; ``text`` (a file name from the trace) is
    never read as markup."""
    prefix = f"[{number}] " if number is not None else ""
    title = Content(f"{FOCUS_MARK if focused else ''}{prefix}{escape(text, 200)}")
    return title.stylize("bold reverse") if focused else title
