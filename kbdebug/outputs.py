"""Output: a command's file appears whole under its name or not at all, and nothing else is lost."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import IO

from kbdebug.errors import UserError

#: The OUT that means the command's stdout.
STDOUT = "-"


def names_stdout(target: str | os.PathLike[str] | None) -> bool:
    """Whether ``target`` is where stdout already writes: ``-``, ``/dev/stdout``
    (``/dev/fd/1``, ``/proc/self/fd/1``), or the very file, pipe or FIFO stdout is
    redirected to. Such an OUT is written through stdout's descriptor."""
    if target is None:
        return False
    if os.fspath(target) == STDOUT:
        return True
    try:
        # os.stat follows /dev/stdout's /proc link to the pipe itself, which realpath cannot.
        return os.path.samestat(os.stat(target), os.fstat(1))
    except (OSError, ValueError):
        return False


@contextmanager
def status_lines(target: str | os.PathLike[str] | None) -> Iterator[None]:
    """While OUT is stdout (see ``names_stdout``), what the command prints goes to stderr:
    stdout carries the stream and nothing else."""
    if names_stdout(target):
        with redirect_stdout(sys.stderr):
            yield
    else:
        yield


class Output:
    """Where a command writes one file.

    A regular target (or a new name) is written to a temporary file beside it,
    ``OUT.partial-PID``, that ``commit`` renames over the target once it is
    whole: a run that fails or is refused leaves the target as it was, two runs
    to one path never interleave (the last rename wins), and a killed run leaves
    its bytes under a name that says they are partial. The rename goes through a
    symlink to the file it points at. A device or FIFO (``/dev/null``, a named
    pipe, ``/dev/fd/N`` of a pipe) is written directly and never removed.

    With ``stdout``, an OUT that ``names_stdout`` (``-``, ``/dev/stdout``) is
    written to a duplicate of descriptor 1, whatever stdout is (a pipe, a file, a
    socket); the caller prints its status lines to stderr (``status_lines``).
    A ``binary`` output refuses a terminal, stdout or not.

    An existing regular file is replaced only when it is empty, when ``ours``
    says kbdebug wrote it, or with ``force``; otherwise the constructor raises
    UserError naming ``what`` it should have been.
    """

    def __init__(
        self,
        target: str | os.PathLike[str],
        *,
        what: str,
        ours: Callable[[Path], bool],
        force: bool,
        stdout: bool = False,
        binary: bool = False,
    ) -> None:
        self.target = Path(target)
        self.stdout = stdout and names_stdout(target)
        #: How messages name the output: "stdout" for ``-``, else the path.
        self.name = "stdout" if self.stdout and os.fspath(target) == STDOUT else str(self.target)
        self.what = what
        self._ours = ours
        self._force = force
        self._real = Path(os.path.realpath(self.target))
        self.stream = self.stdout
        self.path = self.target  # where the bytes go: the temporary file once open
        self._temp: Path | None = None
        self._file: IO | None = None
        if self.stdout:
            # Python leaves sys.__stdout__ None when descriptor 1 was closed at start-up: a file
            # opened since (the trace, the index cache) may hold descriptor 1 now, and the
            # stream must never go into it.
            try:
                if sys.__stdout__ is None:
                    raise OSError
                os.fstat(1)
            except OSError:
                raise UserError(f"cannot write {self.name}: stdout is closed") from None
            terminal = os.isatty(1)
        else:
            mode = self._mode()
            if mode is not None and not stat.S_ISREG(mode):
                if stat.S_ISDIR(mode):
                    raise UserError(f"{self.name}: is a directory")
                self.stream = True
            terminal = mode is not None and stat.S_ISCHR(mode) and _is_terminal(self.target)
        if binary and terminal:
            raise UserError(
                f"{self.name} is a terminal, and {what} is binary: "
                "redirect it to a file (> OUT) or pipe it"
            )
        self._check_existing()

    def open(self, mode: str = "wb", **kwargs) -> IO:
        """Create the temporary file (or open the stream) and return it for writing."""
        try:
            if self.stdout:
                # A duplicate: closing it leaves descriptor 1 (and sys.stdout) to the interpreter.
                self._file = os.fdopen(os.dup(1), mode, **kwargs)
            elif self.stream:
                self._file = open(self.target, mode, **kwargs)  # noqa: SIM115 - closed by commit
            else:
                fd, self._temp = self._create_temp()
                # Named as the user named the target (relative stays relative), unless a
                # symlink put it elsewhere.
                beside = self.target.with_name(self._temp.name)
                self.path = beside if beside.resolve() == self._temp.resolve() else self._temp
                self._file = os.fdopen(fd, mode, **kwargs)
        except OSError as e:
            raise UserError(f"cannot write {self.name}: {e.strerror or e}") from None
        return self._file

    def commit(self) -> None:
        """Put the finished file in place (close a stream). A refused write is exit status 1."""
        try:
            if self._file is not None:
                self._file.flush()
                if self._temp is not None:
                    # On disk before the rename: a crash cannot leave the name on an empty file.
                    os.fsync(self._file.fileno())
                self._file.close()
                self._file = None
        except OSError as e:
            self.discard()
            raise UserError(f"cannot write {self.name}: {e.strerror or e}", status=1) from None
        if self._temp is None:
            return
        # Checked again: a file that appeared at the target during the run is kept too.
        self._check_existing(kept=self._temp)
        try:
            os.replace(self._temp, self._real)
        except OSError as e:
            self.discard()
            raise UserError(f"cannot write {self.name}: {e.strerror or e}", status=1) from None
        self._temp = None
        self.path = self.target

    def discard(self) -> None:
        """Close and remove the temporary file (a stream is only closed)."""
        self._close()
        if self._temp is not None:
            # Only the file this Output created (O_EXCL) is ever removed.
            self._temp.unlink(missing_ok=True)
            self._temp = None

    def keep(self) -> Path:
        """Close and leave the temporary file where it is (a partial output); return its path."""
        self._close()
        return Path(self.path)

    def size(self) -> int:
        """Bytes in the temporary file (0 for a stream, whose size is not a file's)."""
        return 0 if self._temp is None else self._temp.stat().st_size

    # Internals

    def _mode(self) -> int | None:
        try:
            # The target, not its realpath: /dev/fd/N of a pipe has no path realpath could give.
            return os.stat(self.target).st_mode
        except FileNotFoundError:
            return None
        except OSError as e:
            raise UserError(f"cannot write {self.name}: {e.strerror or e}") from None

    def _check_existing(self, *, kept: Path | None = None) -> None:
        if self.stream or self._force:
            return
        try:
            st = os.stat(self._real)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0 or self._ours(self._real):
            return
        if kept is not None:
            self._close()
            raise UserError(
                f"{self.name} appeared meanwhile and is not {self.what}; the output is in "
                f"{kept}; use --force to overwrite",
                status=1,
            )
        raise UserError(f"{self.name} exists and is not {self.what}; use --force to overwrite")

    def _create_temp(self) -> tuple[int, Path]:
        base = self._real.parent / f"{self._real.name}.partial-{os.getpid()}"
        for n in range(1, 100):
            path = base if n == 1 else base.with_name(f"{base.name}-{n}")
            try:
                # O_EXCL: never take over a file someone else (or a killed run) left there.
                return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), path
            except FileExistsError:
                continue
        raise FileExistsError(f"{base}: 99 partial files already there")

    def _close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError:
                pass  # the bytes are given up on anyway


def _is_terminal(path: Path) -> bool:
    """Whether the character device ``path`` is a terminal (opened without becoming ours)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return False  # open() names the problem
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)
