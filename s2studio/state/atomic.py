"""The one writer: every file S2 Studio produces (audio, codes, subtitles, logs, projects, voices) goes
through here, so a crash, a full disk or a read-only folder leaves either the old file or the new one,
never half of one and never a stray temp file under a name the person chose (design.md §7).

A file is written to a hidden temp file beside its target, `.<name>.<pid>-<random>.tmp`, created 0600
and locked (`flock`) for as long as it exists; the data is written and fsynced, the mode is set to what
the user's umask gives a new file (0644 under umask 022), and only then is it renamed over the target
and the folder fsynced. `OutputSet` stages several files and renames them together, so a command whose
third output fails leaves none of them. Any failure removes the temp files; the cleanup never raises
and never hides the error. Every `OSError` becomes one `WriteError` line ("No space left on device on …",
"permission denied: …", "read-only file system: …").

Two more shapes of write, for a project that changes a line at a time (`state/project_folder.py`):
`append_durable` adds a line to a file that only grows (a journal: whatever a crash or a full disk cuts short
is only ever its torn tail, cut off before the next append), and `link_file`/`copy_files` give a folder a
file another folder already has, never rewriting either (a hard link; a copy where the disk cannot link).
A set's files are fsynced side by side (`in_parallel`): file systems commit concurrent fsyncs together.

A killed process leaves its temp files behind (no cleanup runs on SIGKILL): staging a file first removes the
stale ones of its target (`state/leftovers.py`). The file system calls this is built from, with their platform
differences (Windows' files held open, its missing `flock`, folder fsync and `fchmod`), are `state/disk.py`.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from s2studio.errors import printable
from s2studio.state.disk import (CLOEXEC, OPEN_FLAGS, WriteError, fcntl, fsync_dir, in_parallel, lock, new_folder_mode,
                                 remove_quietly, replace, set_mode, write_all, write_error)
from s2studio.state.leftovers import TEMP_SUFFIX, clean_stale, is_temp_of

log = logging.getLogger(__name__)

COPY_PIECE = 1 << 20
"""Bytes a copy reads and writes at a time."""


def write_durable(path: Path, data: bytes) -> None:
    """Create the new file `path` (it must not exist) inside a folder being staged (a project's or a
    voice's temp folder, renamed into place as a whole): written, fsynced, given the umask's mode.
    A failure leaves no file and raises `WriteError`."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | OPEN_FLAGS, 0o600)
    except OSError as exc:
        raise write_error(exc, path) from None
    try:
        write_all(fd, data)
        set_mode(fd)
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        remove_quietly(path)
        raise write_error(exc, path) from None
    os.close(fd)


# ----------------------------------------------------------------------------- files committed together


def _more_open_files() -> bool:
    """Raise this process's limit of open files to what the system allows; False when it cannot grow."""
    try:
        import resource
    except ImportError:  # Windows: the C runtime's limit is not this one
        return False
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft * 16, 65536)
    if wanted <= soft:
        return False
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (OSError, ValueError):
        return False
    log.info("open files limit raised from %d to %d for staged outputs", soft, wanted)
    return True


class Staged:
    """One file being staged: the caller of `OutputSet.stage` writes `fd` (or its own handle on it, never
    by the name `tmp`), then calls `finish`. Until it is committed the file lives only under `tmp`."""

    def __init__(self, target: Path, tmp: Path, fd: int) -> None:
        self.target, self.tmp, self.fd = target, tmp, fd
        self.finished = False
        self.synced = False

    def finish(self, sync: bool = True) -> None:
        """The data is all written: give it the umask's mode and make it durable (`sync`; else the commit
        makes it durable, beside the set's other files)."""
        try:
            set_mode(self.fd)
            if sync:
                os.fsync(self.fd)
        except OSError as exc:
            raise write_error(exc, self.target) from None
        self.finished, self.synced = True, sync

    def sync(self) -> None:
        if not self.synced:
            try:
                os.fsync(self.fd)
            except OSError as exc:
                raise write_error(exc, self.target) from None
            self.synced = True




class OutputSet:
    """Files that appear together or not at all. `add` writes each one to its temp file (locked); `commit`
    makes them durable (side by side: `in_parallel`) and renames them all over their targets; leaving a `with OutputSet()` block by an exception
    (or calling `discard`) removes every temp file, so no target is touched.

    Renames in one folder do not fail for want of space, so a failure after `add` is rare; if one does
    fail, the targets already renamed are removed again: a command that fails leaves no output."""

    def __init__(self, keep_renamed: bool = False) -> None:
        self._staged: list[Staged] = []
        self._names: set[Path] = set()
        self._cleaned: set[Path] = set()
        self.keep_renamed = keep_renamed
        """Replacing files whose old version must not be lost either (a project's document): a failure after
        a rename (the folder's fsync) keeps the file renamed, which holds the new bytes whole."""

    def __enter__(self) -> OutputSet:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()

    @property
    def targets(self) -> list[Path]:
        return [s.target for s in self._staged]

    def stage(self, path: Path) -> Staged:
        """A new temp file for `path` (created 0600 and locked) that the caller writes itself, for outputs too
        large to hold in memory: write `fd`, then `finish()`. An `OSError` while writing belongs to the
        target: turn it into `write_error(exc, staged.target)`; leaving through `discard` removes the file."""
        path = Path(path)
        if path in self._names:
            raise ValueError(f"{path} is staged twice")
        if path.parent not in self._cleaned:  # leftovers of a killed run writing the same file
            self._cleaned.add(path.parent)
            clean_stale(path.parent, is_temp_of(path.name))
        if path.is_dir():
            raise WriteError(f"cannot write {printable(path)}: it is a folder; give a file name", path, errno.EISDIR)
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}")
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | OPEN_FLAGS
        try:
            try:
                fd = os.open(tmp, flags, 0o600)
            except OSError as exc:  # each staged file stays open (locked) until the commit: 10,000 line clips
                if exc.errno != errno.EMFILE or not _more_open_files():
                    raise
                fd = os.open(tmp, flags, 0o600)
        except OSError as exc:
            raise write_error(exc, path) from None
        staged = Staged(path, tmp, fd)
        self._staged.append(staged)
        self._names.add(path)
        try:
            lock(fd)
        except OSError as exc:
            self._drop(staged)
            raise write_error(exc, path) from None
        return staged

    def add(self, path: Path, data: bytes | Iterable[bytes]) -> Path:
        """Stage `data` as `path`: bytes, or the file's bytes in pieces (each written as it comes: a document
        made as it is written, never joined into one string whose join would hold the interpreter)."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            return self._add(path, lambda fd: write_all(fd, data))

        def pieces(fd: int) -> None:
            for piece in data:
                write_all(fd, piece)
        return self._add(path, pieces)

    def add_stream(self, path: Path, source: int) -> Path:
        """Stage the rest of the open file `source` (a descriptor) as `path`, copied in pieces."""
        def copy(fd: int) -> None:
            while piece := os.read(source, COPY_PIECE):
                write_all(fd, piece)
        return self._add(path, copy)

    def _add(self, path: Path, write: Callable[[int], None]) -> Path:
        staged = self.stage(path)
        try:
            write(staged.fd)
        except OSError as exc:
            self._drop(staged)
            raise write_error(exc, staged.target) from None
        try:
            staged.finish(sync=False)  # made durable at the commit, beside the set's other files
        except WriteError:
            self._drop(staged)
            raise
        return staged.target

    def add_text(self, path: Path, text: str) -> Path:
        return self.add(path, text.encode("utf-8"))

    def commit(self) -> list[Path]:
        unfinished = [s.target for s in self._staged if not s.finished]
        if unfinished:  # a caller's bug, never a half-written file under a person's name
            self.discard()
            raise ValueError(f"{unfinished[0]} was staged but not finished")
        try:
            in_parallel(Staged.sync, self._staged)
        except WriteError:
            self.discard()
            raise
        done: list[Staged] = []
        try:
            for s in self._staged:
                if fcntl is None:  # Windows renames no file that is open, our own temp file included
                    os.close(s.fd)
                    s.fd = -1
                replace(s.tmp, s.target)
                done.append(s)
            in_parallel(fsync_dir, dict.fromkeys(s.target.parent for s in self._staged))
        except OSError as exc:
            failed = next((s for s in self._staged if s not in done), self._staged[-1])
            if not self.keep_renamed:
                for s in done:
                    remove_quietly(s.target)
            self.discard()
            raise write_error(exc, failed.target) from None
        targets = self.targets
        for s in self._staged:
            if s.fd >= 0:
                os.close(s.fd)
        self._staged.clear()
        self._names.clear()
        return targets

    def discard(self) -> None:
        """Remove every temp file; never raises."""
        for s in list(self._staged):
            self._drop(s)

    def _drop(self, s: Staged) -> None:
        try:
            if s.fd >= 0:
                os.close(s.fd)  # first: Windows removes no file that is open
        except OSError:
            pass
        s.fd = -1
        remove_quietly(s.tmp)
        if s in self._staged:
            self._staged.remove(s)
            self._names.discard(s.target)


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """One file, atomically (see `OutputSet`)."""
    with OutputSet() as out:
        out.add(path, data)
    return Path(path)


def replace_durable(path: Path, data: bytes | Iterable[bytes]) -> None:
    """Replace the file `path` by `data` (bytes, or bytes in pieces) so that at every instant it holds the old
    bytes or the new ones, whatever fails (`WriteError`) or crashes."""
    with OutputSet(keep_renamed=True) as out:
        out.add(path, data)


def write_text_atomic(path: Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


# ----------------------------------------------------------------------------- folders built in one piece


@contextmanager
def staged_folder(parent: Path, prefix: str) -> Iterator[Path]:
    """A new hidden folder `parent/<prefix><random>` to build something in (a voice), locked while it
    exists; an exception removes it. The caller renames it into place inside the `with` block (and
    fsyncs `parent`); a killed run's folder is found by `clean_stale(parent, …prefix…)`."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
        folder = parent / f"{prefix}{secrets.token_hex(6)}"
        folder.mkdir(mode=0o700)
        # locked through a descriptor of the folder; Windows opens no folder (nor removes one a process works in)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | CLOEXEC) if hasattr(os, "O_DIRECTORY") else -1
    except OSError as exc:
        raise write_error(exc, parent / prefix) from None
    try:
        if fd >= 0:
            lock(fd)
        yield folder
    except BaseException:
        remove_quietly(folder)
        raise
    finally:
        if fd >= 0:
            os.close(fd)


def publish_folder(folder: Path, target: Path) -> None:
    """Give a staged folder the user's mode and rename it to `target` (which must not exist)."""
    try:
        os.chmod(folder, new_folder_mode())
        replace(folder, target, folder=True)
        fsync_dir(target.parent)
    except OSError as exc:
        raise write_error(exc, target) from None


# ----------------------------------------------------------------------------- files that only grow, files shared


def append_durable(path: Path, data: bytes, at: int) -> int:
    """Append `data` to the file `path` (created when missing) at byte `at`, the end of what is known good:
    anything beyond it (the torn tail of a write a crash interrupted) is cut off first. Written, fsynced;
    returns the new length. A failure cuts the file back to `at` (where it can) and raises `WriteError`, so
    the file holds either the old content or the new, never half of `data`."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | OPEN_FLAGS, 0o600)
    except OSError as exc:
        raise write_error(exc, path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise WriteError(f"cannot write {printable(path)}: it is not a plain file", Path(path), None)
        os.ftruncate(fd, at)
        os.lseek(fd, at, os.SEEK_SET)
        write_all(fd, data)
        os.fsync(fd)
    except OSError as exc:
        try:
            os.ftruncate(fd, at)
        except OSError:
            pass  # the reader ignores a torn tail anyway
        raise write_error(exc, path) from None
    finally:
        os.close(fd)
    return at + len(data)


LINK_FAILURES = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES})
"""Why a hard link may not be made where a copy can be: another disk, a file system without links, too many."""


def link_file(src: Path, dst: Path) -> bool:
    """Make `dst` (new, in a folder of ours) the same file as the plain file `src` (a hard link): True when done
    (or when `dst` already is a plain file: the files shared this way never change once written), False when
    this disk cannot link them (then `copy_files`). Raises `WriteError` (dst) or `OSError` (src missing, a link
    or not a plain file)."""
    if os.path.lexists(dst):
        if stat.S_ISREG(os.lstat(dst).st_mode):
            return True
        remove_quietly(dst)
    if not stat.S_ISREG(os.lstat(src).st_mode):
        raise OSError(errno.EINVAL, f"{Path(src).name} is not a plain file")
    try:
        os.link(src, dst, follow_symlinks=False)
    except FileExistsError:
        return True
    except OSError as exc:
        if exc.errno not in LINK_FAILURES:
            raise write_error(exc, dst) from None
        return False
    return True


def copy_files(pairs: Iterable[tuple[Path, Path]]) -> None:
    """Copy each plain file `src` to `dst`, all together or none (`OutputSet`: fsynced side by side)."""
    fds: list[int] = []
    try:
        with OutputSet() as out:
            for src, dst in pairs:
                fds.append(os.open(src, os.O_RDONLY | OPEN_FLAGS))
                out.add_stream(dst, fds[-1])
    finally:
        for fd in fds:
            os.close(fd)
