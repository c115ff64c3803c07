"""Source locations of tl calls: the first frame outside the emulator, its path relative to
the launch's root (see launch_root), so a trace names files alike from any working directory."""

from __future__ import annotations

import inspect
import linecache
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType

from emulator.trace.schema import SourceLoc

#: Code names of comprehensions: their frames belong to the function they are written in.
_COMPREHENSIONS = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"})
#: Files whose frames are the emulator's own (a tl call's location is the caller outside them).
_INTERNAL = {
    str(Path(__file__).resolve().parent / name)
    for name in (
        "tl.py",
        "tl_compute.py",
        "tensor.py",
        "futures.py",
        "runner.py",
        "source.py",
        "scope.py",
    )
}
#: Code flags of functions whose frame can be suspended and resumed from another place.
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_getframe = sys._getframe
#: kbdebug's own root: its files (the built-in kernels) are stored relative to it when
#: they are outside the launch's root.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: What marks a folder as a project's root (see launch_root).
ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def launch_root(launch_file: str | os.PathLike[str] | None) -> Path | None:
    """The folder a launch's source paths are relative to, whatever the working directory.

    ``launch_file`` is the file the launch comes from (``FILE.py`` of ``kbdebug run
    FILE.py:FUNCTION``, or the kernel function's file). Its root is the nearest folder
    at or above it holding one of ``ROOT_MARKERS`` or being kbdebug's own root (a copy
    of the checkout, or an installed one, has no marker there), else the file's own
    folder. None for a file that is not one (``<string>``, ``<stdin>``) or None.
    """
    if launch_file is None:
        return None
    name = os.fspath(launch_file)
    if not name or name.startswith("<"):
        return None
    try:
        folder = Path(name).resolve().parent
        for candidate in (folder, *folder.parents):
            if candidate == PROJECT_ROOT or any(
                (candidate / marker).exists() for marker in ROOT_MARKERS
            ):
                return candidate
    except OSError:
        return None
    return folder


def relative_path(filename: str, root: Path | None = None) -> str:
    """A path that depends neither on where the project lives nor on the working directory.

    Files inside ``root`` (see launch_root) are relative to it, kbdebug's own files
    relative to its root, anything else by its base name. A name like ``<string>``
    stays as it is.
    """
    if filename.startswith("<"):
        return filename
    path = Path(filename)
    try:
        path = path.resolve()
    except OSError:
        return path.name
    for base in (root, PROJECT_ROOT):
        if base is not None and path.is_relative_to(base):
            return path.relative_to(base).as_posix()
    return path.name


def _resolved(filename: str) -> str:
    try:
        return str(Path(filename).resolve()) if not filename.startswith("<") else filename
    except OSError:
        return filename


def _distinct(filename: str, taken: dict[str, str]) -> str | None:
    """A trace name for ``filename`` not in ``taken`` (name -> resolved file) when its
    usual one is another file's: the shortest tail of its path that is free."""
    try:
        parts = Path(filename).resolve().parts
    except OSError:
        parts = Path(filename).parts
    for k in range(2, len(parts)):
        name = "/".join(parts[-k:])
        if name not in taken:
            return name
    return None


class LocationCache:
    """Maps tl call sites to SourceLoc and reports each new file's source once.

    ``kernel_code``, set by the runner, is the kernel function's code object: a tl
    call made in any other function (a helper the kernel called) gets, as its loc's
    ``caller``, the kernel's line that called into that helper.

    Call sites are keyed on what is cheap to read and hash: the id of the code
    object (kept alive in ``_codes`` so the id stays its own; code objects do not
    cache their hash) and the frame's ``f_lasti``, the offset of the call
    instruction, which belongs to exactly one line. The line itself is looked up
    once per call site.
    """

    def __init__(self, on_new_file: Callable[[str, str], None], root: Path | None = None):
        # (id(code), line) -> loc: one loc per line, whichever call on it asked first.
        self._locs: dict[tuple[int, int], SourceLoc] = {}
        # Offset of a call in the kernel function -> its loc.
        self._in_kernel: dict[int, SourceLoc] = {}
        # (id(code), offset) -> loc of a call outside the kernel function's frames.
        self._outside: dict[tuple[int, int], SourceLoc] = {}
        # Every code object whose id is in a key, by id.
        self._codes: dict[int, CodeType] = {}
        # co_filename -> its name in the trace; that name -> the file it names (resolved).
        self._files: dict[str, str] = {}
        self._names: dict[str, str] = {}
        #: The launch's root (see launch_root): trace names are relative to it.
        self.root = root
        self._on_new_file = on_new_file
        self._kernel_code: CodeType | None = None
        # (id(helper code), kernel offset) -> {helper offset: loc with its caller}.
        self._helper_tables: dict[tuple[int, int], dict[int, SourceLoc]] = {}
        # The last helper frame asked about (kept, so its id is not reused) and its table.
        self._helper_frame: FrameType | None = None
        self._helper_locs: dict[int, SourceLoc] = {}

    @property
    def kernel_code(self) -> CodeType | None:
        return self._kernel_code

    @kernel_code.setter
    def kernel_code(self, code: CodeType | None) -> None:
        self._kernel_code = code
        self._in_kernel = {}
        self._helper_frame = None
        self._helper_locs = {}
        self._helper_tables = {}

    def caller(self, depth: int = 2) -> SourceLoc:
        """The location of the innermost frame outside the emulator's kernel layer, with
        the kernel's calling line as its ``caller`` if that frame is not the kernel's.

        ``depth``: where to start looking, as for ``sys._getframe`` from here (2: the
        caller of the tl method that asks). A tl method always reached through one more
        emulator frame (a tl method or a TensorHandle operator) passes 3, which skips
        that frame without making a frame object of it; the emulator's own frames are
        still skipped from wherever the search starts.
        """
        frame: FrameType | None = _getframe(depth)
        code = frame.f_code
        if code.co_filename in _INTERNAL:
            while frame is not None and frame.f_code.co_filename in _INTERNAL:
                frame = frame.f_back
            if frame is None:
                return SourceLoc("<unknown>", 0, "<unknown>")
            code = frame.f_code
        if code is self._kernel_code:  # the hot path: a tl call in the kernel function
            loc = self._in_kernel.get(frame.f_lasti)
            if loc is None:
                loc = self._in_kernel[frame.f_lasti] = self.of_frame(frame, frame.f_lineno)
            return loc
        if frame is self._helper_frame:  # another tl call of the same helper call
            loc = self._helper_locs.get(frame.f_lasti)
            if loc is not None:
                return loc
        return self._in_helper(frame, code)

    def _in_helper(self, frame: FrameType, code: CodeType) -> SourceLoc:
        """The loc of a tl call outside the kernel function: inside a helper (called
        directly or through others), with the kernel frame's line as its caller."""
        if code.co_name in _COMPREHENSIONS:
            return self._in_comprehension(frame)
        kernel_code = self._kernel_code
        kernel = frame.f_back if kernel_code is not None else None
        while kernel is not None and kernel.f_code is not kernel_code:
            kernel = kernel.f_back
        if kernel is None:
            key = (id(code), frame.f_lasti)
            loc = self._outside.get(key)
            if loc is None:
                self._codes[key[0]] = code
                loc = self._outside[key] = self.of_frame(frame, frame.f_lineno)
            return loc
        # One table per (helper code, kernel offset): the loc of each call offset in it.
        key = (id(code), kernel.f_lasti)
        table = self._helper_tables.get(key)
        if table is None:
            self._codes[key[0]] = code
            table = self._helper_tables[key] = {}
        loc = table.get(frame.f_lasti)
        if loc is None:
            caller = self.of_frame(kernel, kernel.f_lineno)
            loc = self.of_frame(frame, frame.f_lineno)._replace(caller=caller)
            table[frame.f_lasti] = loc
        # While a (plain function's) frame runs, the frames that called it stay where
        # they are, so its later calls find their locs in this table by offset alone; a
        # generator's frame can be resumed from elsewhere. Holding the frame keeps its
        # identity from being reused.
        if not code.co_flags & _RESUMABLE:
            self._helper_frame = frame
            self._helper_locs = table
        return loc

    def _in_comprehension(self, frame: FrameType) -> SourceLoc:
        """A comprehension's tl call is its enclosing function's, at the comprehension's
        line: ``[tl.load(p) for p in ps]`` in the kernel is the kernel's line, not a
        helper called ``<listcomp>`` called from that same line."""
        line = frame.f_lineno
        outer = frame.f_back
        while outer is not None and outer.f_code.co_name in _COMPREHENSIONS:
            outer = outer.f_back
        if outer is None:
            return self.of_frame(frame, line)
        if outer.f_code is self._kernel_code:
            return self.of_code(outer.f_code, line)
        loc = self._in_helper(outer, outer.f_code)
        return loc if loc.line == line else loc._replace(line=line)

    def of_frame(self, frame: FrameType, line: int) -> SourceLoc:
        return self.of_code(frame.f_code, line)

    def of_code(self, code: CodeType, line: int | None = None) -> SourceLoc:
        line = line or code.co_firstlineno
        key = (id(code), line)
        loc = self._locs.get(key)
        if loc is None:
            self._codes[key[0]] = code
            loc = SourceLoc(self.file(code.co_filename), line, code.co_name)
            self._locs[key] = loc
        return loc

    def file(self, filename: str) -> str:
        rel = self._files.get(filename)
        if rel is None:
            rel = relative_path(filename, self.root)
            resolved = _resolved(filename)
            if self._names.setdefault(rel, resolved) != resolved:
                # Another file has this name (two helpers.py outside the root): this one
                # gets the shortest tail of its path that is free, so neither is mistaken
                # for the other and the names stay the same from any working directory.
                rel = _distinct(filename, self._names) or rel
                self._names.setdefault(rel, resolved)
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
