"""A run's output check as its trace records it (the footer's ``check``, traces/FORMAT.md):
passed, or failed with what it said and the first wrong block."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CheckVerdict"]


@dataclass(frozen=True)
class CheckVerdict:
    """The verdict of the numpy check ``kbdebug run`` ran on the run's output."""

    ok: bool
    #: What the failed check said (one line), None when it passed.
    message: str | None = None
    #: The first wrong block (``O[16:32, :]``), None when unknown or it passed.
    block: str | None = None

    @classmethod
    def of(cls, footer: dict[str, Any] | None) -> CheckVerdict | None:
        """The verdict a footer carries (the reader checked its types), None without one."""
        check = (footer or {}).get("check")
        if not isinstance(check, dict) or type(check.get("ok")) is not bool:
            return None
        return cls(check["ok"], check.get("message"), check.get("block"))

    def text(self) -> str:
        """``output check failed (first wrong block O[16:32, :])``, ``output check
        failed: MESSAGE`` without a block, or ``output check passed``. Not escaped."""
        if self.ok:
            return "output check passed"
        if self.block:
            return f"output check failed (first wrong block {self.block})"
        if self.message:
            return f"output check failed: {self.message}"
        return "output check failed"

    def json(self) -> dict[str, Any]:
        """``{"ok", "message", "block"}``, as the footer has it."""
        return {"ok": self.ok, "message": self.message, "block": self.block}
