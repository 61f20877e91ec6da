"""The files this server process made, and only those, are the files it removes.

Gradio names an upload by its content (``<upload folder>/<sha256>/<name>``) and a cached result
likewise, so two servers sharing one upload folder (a restart beside the old process, two workers)
make files of the same name: a fresh process's SIGTERM removed 10 files that earlier processes had
made with the same content, the cached examples included. And a crash (SIGKILL, out of memory) left
everything behind for good (355 MB in one probe).

So each process keeps a ledger, ``<pid>.owned``: the inode and path of every file it made in the
upload folder (an upload it moved in, a result Gradio cached for it). The ledgers live in a private
folder (:func:`ledger_folder`, mode 0700) beside the system's temporary folder, never inside a folder
Gradio serves: a ledger in the upload folder was served to anyone who asked for its path, and listed
every client's uploads and results (1,079 paths in one probe). At shutdown it
removes those files whose inode is still its own; at start-up it removes what the ledgers of dead
processes list, and their results folders (``nstcam-out-<pid>-*``). An upload whose name is already
taken keeps the file that was there (its content is the same: the folder is its hash) instead of
replacing it, so no process ever removes a file another one made.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nstcam.app.gradio_internals as gradio_internals

__all__ = [
    "OWNED",
    "STARTED",
    "Owned",
    "claimed_by_others",
    "keep_existing_uploads",
    "ledger_folder",
    "ledger_path",
    "others_files",
    "pid_alive",
    "prune_empty",
    "sweep_leftovers",
]

logger = logging.getLogger("nstcam.app")

_LEDGER = re.compile(r"^(\d+)\.owned$")
_OUTBOX = re.compile(r"^nstcam-out-(\d+)-")


def ledger_path(upload_folder: str | os.PathLike) -> Path:
    """Where the servers sharing ``upload_folder`` keep their ledgers: a folder of the system's
    temporary folder named by the upload folder's real path (so servers sharing it share it), or the
    upload folder's parent where the temporary folder is inside the upload folder; never inside it,
    so never served. Not made here (:func:`ledger_folder` makes it)."""
    upload = Path(os.path.realpath(upload_folder))
    base = Path(os.path.realpath(tempfile.gettempdir()))
    if base.is_relative_to(upload):
        base = upload.parent
    return base / f".nstcam-ledgers-{hashlib.sha256(str(upload).encode()).hexdigest()[:16]}"


def ledger_folder(upload_folder: str | os.PathLike) -> Path:
    """:func:`ledger_path`, made with mode 0700 where it is not there; removed by the last server of
    that upload folder to stop (:meth:`Owned.remove_all`)."""
    folder = ledger_path(upload_folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def _ledgers(upload_folder: str | os.PathLike) -> list[Path]:
    folder = ledger_folder(upload_folder)
    return [p for p in folder.glob("*.owned") if _LEDGER.match(p.name)]


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Owned:
    """This process's ledger of the files it made in the upload folder.

    Args:
        folder: the upload folder; None: Gradio's (``GRADIO_TEMP_DIR``), read when first needed.
    """

    def __init__(self, folder: str | os.PathLike | None = None) -> None:
        self._folder = Path(folder) if folder is not None else None
        self._lock = threading.Lock()
        self._files: dict[str, int] = {}

    @property
    def folder(self) -> Path:
        if self._folder is None:
            self._folder = Path(gradio_internals.upload_folder())
        return self._folder

    @property
    def ledger(self) -> Path:
        return ledger_folder(self.folder) / f"{os.getpid()}.owned"

    def add(self, path: str | os.PathLike) -> None:
        """Records ``path`` (a file this process just made) with its inode."""
        try:
            inode = os.stat(path).st_ino
        except OSError:
            return
        with self._lock:
            self._files[str(path)] = inode
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self.ledger, "a", encoding="utf-8") as fh:
                fh.write(f"{inode}\t{path}\n")

    def owns(self, path: str | os.PathLike) -> bool:
        """Whether ``path`` is a file this process made and still the same file (same inode)."""
        with self._lock:
            inode = self._files.get(str(path))
        try:
            return inode is not None and os.stat(path).st_ino == inode
        except OSError:
            return False

    def remove_all(self) -> int:
        """Removes every file of the ledger still this process's, the folders left empty, and the
        ledger; returns how many files."""
        with self._lock:
            files, self._files = dict(self._files), {}
        others = claimed_by_others(self.folder)  # a file another live server recorded as its own stays
        removed = _remove_listed({k: v for k, v in files.items() if v not in others}, self.folder)
        self.ledger.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # the last server of that upload folder: nothing left
            self.ledger.parent.rmdir()
        return removed


def _remove_listed(files: dict[str, int], root: Path) -> int:
    removed = 0
    for name, inode in files.items():
        path = Path(name)
        try:
            if path.is_symlink() or path.stat().st_ino != inode:
                continue  # another file now has that name: not ours
            path.unlink()
            removed += 1
        except OSError:
            continue
        prune_empty(path.parent, root)
    return removed


def prune_empty(folder: Path, root: Path) -> None:
    """Removes ``folder`` and its parents up to ``root`` (excluded) while they are empty."""
    root = Path(os.path.realpath(root))
    while Path(os.path.realpath(folder)) != root and Path(os.path.realpath(folder)).is_relative_to(root):
        try:
            folder.rmdir()  # only if empty
        except OSError:
            return
        folder = folder.parent


def _read_ledger(path: Path) -> dict[str, int]:
    files = {}
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            inode, _, name = line.partition("\t")
            if inode.isdigit() and name:
                files[name] = int(inode)
    except OSError:
        pass
    return files


def claimed_by_others(folder: str | os.PathLike) -> set[int]:
    """Inodes that the ledgers of other live processes in ``folder`` list."""
    inodes: set[int] = set()
    for ledger in _ledgers(folder):
        m = _LEDGER.match(ledger.name)
        if m and int(m[1]) != os.getpid() and pid_alive(int(m[1])):
            inodes.update(_read_ledger(ledger).values())
    return inodes


def sweep_leftovers(folder: str | os.PathLike, temp: str | os.PathLike | None = None) -> int:
    """At start-up: removes what the ledgers of dead processes in the upload ``folder`` list (the
    files still theirs), those ledgers, and dead processes' results folders in ``temp`` (default the
    system's temporary folder); returns how many files and folders. Live processes' files stay."""
    folder = Path(folder)
    removed = 0
    for ledger in _ledgers(folder) if folder.is_dir() else ():
        m = _LEDGER.match(ledger.name)
        if not m or pid_alive(int(m[1])):
            continue
        removed += _remove_listed(_read_ledger(ledger), folder)
        ledger.unlink(missing_ok=True)
    for outbox in Path(temp or tempfile.gettempdir()).glob("nstcam-out-*"):
        m = _OUTBOX.match(outbox.name)
        if m and outbox.is_dir() and not outbox.is_symlink() and not pid_alive(int(m[1])):
            shutil.rmtree(outbox, ignore_errors=True)
            removed += 1
    if removed:
        logger.info("removed %d file(s) and folder(s) that stopped servers left behind", removed)
    return removed


OWNED = Owned()
"""This process's ledger (the upload folder is Gradio's)."""


class _KeepExisting:
    """``os`` as Gradio's upload route sees it: ``rename`` never replaces a file already there (its
    content is the same: the folder is the content's hash); a file moved in, or found there, is
    recorded in :data:`OWNED` and granted to the uploading client (:mod:`nstcam.app.disk.access`).
    Recording the one found there is what keeps it for this process's visitor when the server that
    made it stops: a server removes only files no other live server's ledger holds (before, server
    B's SIGTERM removed the photo server A's visitor had uploaded after B, with the same content)."""

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    @staticmethod
    def rename(src: str | os.PathLike, dst: str | os.PathLike) -> None:
        from nstcam.app.disk.access import ACCESS

        try:
            os.link(src, dst)  # fails where dst exists: the file there stays its maker's
        except FileExistsError:
            os.unlink(src)
            OWNED.add(dst)  # claimed by this process too: a server that stops first leaves it here
            ACCESS.grant(dst)  # the same content (the folder is its hash): this client may read it too
            return
        except OSError:  # a file system without hard links: a plain move (Gradio's own)
            os.rename(src, dst)
        else:
            os.unlink(src)
        OWNED.add(dst)
        ACCESS.grant(dst)  # the uploader's


STARTED = time.time() - 1.0
"""When this process began serving (its module's import, a second early): an older file is never its own."""


def others_files(files: set[str]) -> set[str]:
    """Those of ``files`` that are not this process's to remove: recorded by another live server's
    ledger (whether or not this process's holds them too: an upload found in place is claimed by
    both), or older than this process and not in its own ledger."""
    if not files:
        return set()
    folder = OWNED.folder
    others = claimed_by_others(folder)
    kept = set()
    for name in files:
        try:
            st = os.lstat(name)
        except OSError:
            continue
        if st.st_ino in others:  # another live server holds it, whoever made it
            kept.add(name)
        elif not OWNED.owns(name) and st.st_ctime < STARTED:
            kept.add(name)
    return kept


def _own_files_only(delete: Callable[..., None]) -> Callable[..., None]:
    """Gradio's ``delete_files_created_by_app`` (its age-based sweep and its shutdown's) over this
    process's files only: the others are left out of each set first."""

    def delete_own(blocks: Any, age: int | None) -> None:
        for temp_set in getattr(blocks, "temp_file_sets", ()):
            temp_set -= others_files(set(temp_set))
        delete(blocks, age)

    return delete_own


def keep_existing_uploads() -> None:
    """Makes Gradio's upload route keep a file already at an upload's name and record the files it
    moves in as this process's, and Gradio's sweeps remove this process's files only (idempotent)."""
    from gradio import route_utils

    gradio_internals.install(route_utils, "os", lambda _: _KeepExisting())
    gradio_internals.install(route_utils, "delete_files_created_by_app", _own_files_only)
