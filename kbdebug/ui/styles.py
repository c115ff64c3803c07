"""component_style: a component class's own style, to layer over a row's background."""

from __future__ import annotations

from rich.style import Style
from textual.widget import Widget


def component_style(widget: Widget, name: str) -> Style:
    """The colours and text style that component class ``name`` sets, and nothing else.

    A full component style carries the widget's background, which would paint
    over a highlighted row; this keeps only what the class sets itself, with a
    translucent background blended as Textual blends it.
    """
    style = widget.get_component_rich_style(name, partial=True)
    if style.bgcolor is not None:
        style += Style(bgcolor=widget.get_component_rich_style(name).bgcolor)
    return style
