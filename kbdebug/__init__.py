"""kbdebug: replay and debug traces of asynchronous kernel loads."""

__version__ = "0.1.0"
