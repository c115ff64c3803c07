"""component_style: a component class's own style, to layer over a row's background."""

from __future__ import annotations

from rich.style import Style
from textual.widget import Widget


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
