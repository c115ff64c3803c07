"""UserError: bad input to a kbdebug command, reported as one line with an exit status."""

from __future__ import annotations


class UserError(Exception):
    """Bad input: printed as one line, exit status 2 unless ``status`` says otherwise."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status
