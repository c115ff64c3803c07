"""The kbdebug terminal app (Textual): one app, for one run or two runs compared.

Imports ``kbdebug.analysis``, ``kbdebug.replay`` and ``emulator.trace``; every figure
it shows comes from the public Replay, index and Analysis API.

- ``app``: the app itself (keys, palette, key bar, help, loading, stepping,
  breakpoints, the findings worker) and its single-run mode, ``KbdebugApp``;
- ``compare``: the compare mode, ``CompareApp``: two runs and the link between them;
- ``panes``: the panes (timeline, source, futures, events, findings, mesh) and their drawing;
- ``screens``: the dialogs over the app (help, prompt, breakpoint list).
"""

from kbdebug.ui.app.single import KbdebugApp

__all__ = ["KbdebugApp"]
