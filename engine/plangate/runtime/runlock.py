"""Per-run exclusive locks: at most one process executes or changes a run at a time.

Every process that executes a run or changes what it will do (`run`, `resume`, `abort`,
`reconcile`, a new plan version) holds the run's lock while it does. The lock is an advisory
`flock` on a file beside the journal, `JOURNAL.locks/<sha256 of the run id, 32 hex>.lock`:
- the kernel releases it when its holder exits, however it exits (SIGKILL included), so a crashed
  holder never blocks a run: there is no lease to expire and no heartbeat to trust;
- `flock` locks belong to an open file description, so two `Runtime`s in one process exclude each
  other as two processes do;
- the holder writes `{"pid", "host", "since"}` into the file, for the message that names it; the
  file is emptied before the lock is released and never deleted (deleting a lock file lets a
  waiter lock a name that no longer exists).

A call abandoned past its timeout may still take effect in its thread: `pin(run)` keeps the run
held until that call returns (the release function runs from the call's thread), so no other
process settles or repeats a call that is still in flight.

Acquiring tries for a short while (`WAIT_SECONDS`: a reader's probe holds the lock for an instant)
and then raises `RunBusy` naming the holder. Within one thread of a `RunLocks` the lock is
re-entrant: a `plangate run` that records a new version and then advances holds it once across
both. The threads of one `Runtime` share its `RunLocks` and exclude each other as processes do: a
thread inside another's hold waits as long and is refused the same way (a run held only by pins is
taken by whichever thread asks, as the `Runtime` that made those calls tracks them).

`holder(run)` tells a reader (`plangate status`) whether a live process holds the run, with a
shared, non-blocking probe; it never creates a file, so it works on a read-only journal.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

WAIT_SECONDS = 1.0


class RunBusy(Exception):
    """Another live process holds the run; the message names it."""


@dataclass
class _Hold:
    """This process's hold on one run: the locked file, how many `hold` blocks of its owner thread
    are open, and how many pins (calls in flight) keep it."""

    descriptor: int | None  # None while the owner is still acquiring it
    owner: int | None  # the thread inside a `hold` block; None when only pins keep the run
    holds: int = 0
    pins: int = 0


class RunLocks:
    """The locks of the runs of one journal, as held by one `Runtime` (from any of its threads)."""

    def __init__(self, journal_path: Path) -> None:
        self.directory = journal_path.with_name(journal_path.name + ".locks")
        self._held: dict[str, _Hold] = {}
        self._mutex = threading.Lock()  # threads share the holds; `pin`'s release runs in a tool's thread

    def path(self, run: str) -> Path:
        return self.directory / (hashlib.sha256(run.encode()).hexdigest()[:32] + ".lock")

    @contextmanager
    def hold(self, run: str) -> Iterator[None]:
        """Hold the run's lock for the block; `RunBusy` if another holder has it. Re-entrant within a
        thread; another thread of this `RunLocks` is refused like another process (after the same
        wait), except where only pins keep the run: a call in flight, which the `Runtime` tracks."""
        me = threading.get_ident()
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            with self._mutex:
                held = self._held.get(run)
                if held is None:
                    held = self._held[run] = _Hold(None, me, holds=1)
                    acquire = True
                    break
                if held.owner in (me, None):
                    held.owner = me
                    held.holds += 1
                    acquire = False
                    break
            if time.monotonic() >= deadline:
                raise RunBusy(f"run `{run}` is being executed by another thread of process {os.getpid()}")
            time.sleep(0.05)
        if acquire:
            try:
                descriptor = self._acquire(run)
            except BaseException:
                with self._mutex:
                    del self._held[run]
                raise
            with self._mutex:
                held.descriptor = descriptor
        try:
            yield
        finally:
            with self._mutex:
                held.holds -= 1
                if held.holds == 0:
                    held.owner = None
                self._let_go(run, held)

    def pin(self, run: str) -> Callable[[], None]:
        """Keep the run (held now) held until the returned function is called, from any thread."""
        with self._mutex:
            held = self._held[run]
            held.pins += 1
        released = threading.Event()

        def release() -> None:
            if not released.is_set():
                released.set()
                with self._mutex:
                    held.pins -= 1
                    self._let_go(run, held)
        return release

    def _let_go(self, run: str, held: _Hold) -> None:
        """Unlock the run once nothing keeps it (called with the mutex held)."""
        if held.holds or held.pins:
            return
        del self._held[run]
        assert held.descriptor is not None
        os.ftruncate(held.descriptor, 0)
        os.close(held.descriptor)  # closing the last descriptor releases the lock

    def holder(self, run: str) -> str | None:
        """'process N on HOST' when another live process holds the run, 'another thread of process
        N' when another thread of this `RunLocks` does; else None."""
        with self._mutex:
            held = self._held.get(run)
            if held is not None:
                busy = held.owner is not None and held.owner != threading.get_ident()
                return f"another thread of process {os.getpid()}" if busy else None
        try:
            descriptor = os.open(self.path(run), os.O_RDONLY)
        except OSError:
            return None  # never locked, or not readable: nobody can be shown as holding it
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _describe(descriptor)
            fcntl.flock(descriptor, fcntl.LOCK_UN)
            return None
        finally:
            os.close(descriptor)

    def _acquire(self, run: str) -> int:
        self.directory.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path(run), os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    who = _describe(descriptor)
                    os.close(descriptor)
                    raise RunBusy(f"run `{run}` is being executed by {who}") from None
                time.sleep(0.05)
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                          "since": time.time()}).encode(), 0)
        return descriptor


def _describe(descriptor: int) -> str:
    """Who holds the lock, from what the holder wrote (it may not have written it yet)."""
    try:
        holder = json.loads(os.pread(descriptor, 4096, 0) or b"null")
        return f"process {int(holder['pid'])} on {holder['host']}"
    except (OSError, ValueError, TypeError, KeyError):
        return "another process"
