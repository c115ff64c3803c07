"""How many cases the fuzz and property tests run: CI's counts, or more when asked.

``KBDEBUG_FUZZ_SCALE=50 pytest tests/test_trace_hostile.py tests/test_trace_v12.py`` runs
fifty times CI's cases locally, every bound (time, memory) kept as it is.
"""

from __future__ import annotations

import os


def cases(ci: int) -> int:
    """``ci`` (the count CI runs) times KBDEBUG_FUZZ_SCALE (default 1), at least 1."""
    scale = float(os.environ.get("KBDEBUG_FUZZ_SCALE", "1"))
    return max(1, round(ci * scale))
