"""Source locations of tl calls: the first frame outside the emulator, path made relative."""

from __future__ import annotations

import linecache
import sys
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType

from emulator.trace.schema import SourceLoc

#: Files whose frames are the emulator's own (a tl call's location is the caller outside them).
_INTERNAL = {
    str(Path(__file__).resolve().parent / name)
    for name in ("tl.py", "tensor.py", "futures.py", "runner.py", "source.py")
}
#: The project root: paths inside it are stored relative to it.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def relative_path(filename: str) -> str:
    """A path that does not depend on where the checkout lives.

    Files inside the project are relative to its root, files under the working
    directory relative to it, anything else by its base name.
    """
    path = Path(filename)
    try:
        path = path.resolve()
    except OSError:
        return path.name
    for root in (PROJECT_ROOT, Path.cwd()):
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            continue
    return path.name


class LocationCache:
    """Maps (code object, line) to SourceLoc and reports each new file's source once.

    ``kernel_code``, set by the runner, is the kernel function's code object: a tl
    call made in any other function (a helper the kernel called) gets, as its loc's
    ``caller``, the kernel's line that called into that helper.
    """

    def __init__(self, on_new_file: Callable[[str, str], None]):
        self._locs: dict[tuple[object, int], SourceLoc] = {}
        # (helper code, helper line, kernel line) -> loc with its caller.
        self._called: dict[tuple[object, int, int], SourceLoc] = {}
        self._files: dict[str, str] = {}
        self._on_new_file = on_new_file
        self.kernel_code: CodeType | None = None

    def caller(self) -> SourceLoc:
        """The location of the innermost frame outside the emulator's kernel layer, with
        the kernel's calling line as its ``caller`` if that frame is not the kernel's."""
        frame: FrameType | None = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename in _INTERNAL:
            frame = frame.f_back
        if frame is None:
            return SourceLoc("<unknown>", 0, "<unknown>")
        code, line = frame.f_code, frame.f_lineno
        if code is self.kernel_code:  # the hot path: a tl call in the kernel function
            loc = self._locs.get((code, line))
            return loc if loc is not None else self.of_frame(frame, line)
        return self._in_helper(frame, code, line)

    def _in_helper(self, frame: FrameType, code: CodeType, line: int) -> SourceLoc:
        """The loc of a tl call outside the kernel function: inside a helper (called
        directly or through others), with the kernel frame's line as its caller."""
        kernel_code = self.kernel_code
        kernel = frame.f_back if kernel_code is not None else None
        while kernel is not None and kernel.f_code is not kernel_code:
            kernel = kernel.f_back
        if kernel is None:
            return self.of_frame(frame, line)
        key = (code, line, kernel.f_lineno)
        loc = self._called.get(key)
        if loc is None:
            caller = self.of_frame(kernel, key[2])
            loc = self.of_frame(frame, line)._replace(caller=caller)
            self._called[key] = loc
        return loc

    def of_frame(self, frame: FrameType, line: int) -> SourceLoc:
        key = (frame.f_code, line)
        loc = self._locs.get(key)
        if loc is None:
            loc = SourceLoc(self.file(frame.f_code.co_filename), line, frame.f_code.co_name)
            self._locs[key] = loc
        return loc

    def of_code(self, code, line: int | None = None) -> SourceLoc:
        key = (code, line or code.co_firstlineno)
        loc = self._locs.get(key)
        if loc is None:
            loc = SourceLoc(self.file(code.co_filename), key[1], code.co_name)
            self._locs[key] = loc
        return loc

    def file(self, filename: str) -> str:
        rel = self._files.get(filename)
        if rel is None:
            rel = relative_path(filename)
            self._files[filename] = rel
            self._on_new_file(rel, "".join(linecache.getlines(filename)))
        return rel


_EMULATOR_DIR = PROJECT_ROOT / "emulator"
_KERNELS_DIR = _EMULATOR_DIR / "kernels"
_LIBRARY_DIRS = tuple({Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()})


def is_kernel_code(filename: str) -> bool:
    """Whether a traceback frame is kernel code (not the emulator, not a library)."""
    path = Path(filename).resolve()
    if path.is_relative_to(_EMULATOR_DIR):
        return path.is_relative_to(_KERNELS_DIR)
    return not any(path.is_relative_to(d) for d in _LIBRARY_DIRS)
