"""The kbdebug terminal app (Textual): timeline, source, futures, events and findings panes.

Imports only ``kbdebug.replay`` and ``emulator.trace``; every figure it shows
comes from the public Replay and index API.
"""

from kbdebug.ui.app import KbdebugApp

__all__ = ["KbdebugApp"]
