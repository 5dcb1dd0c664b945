"""The durable journal: an append-only, hash-chained log of every run, in one SQLite file.

Storage. One SQLite file in WAL mode with `synchronous=FULL`. `append` runs in its own
`BEGIN IMMEDIATE` transaction and has committed (and synced) when it returns, so the runtime calls
it before every effect and relies on the record surviving a crash. `append_many` writes several
records of one run in one such transaction: a crash leaves all or none of them (the runtime writes
a reconciliation and the result it settles on together). `append(..., after=(seq, hash))`
is a compare-and-append: inside that transaction it checks that the run's head is still the record
the caller last read, and raises `StaleHead` (writing nothing) when another record came first — so
a decision taken on what the caller read is recorded only if it still holds. WAL lets other processes
(`plangate status`, `plangate approve`) read a consistent snapshot while a run writes; writers queue
on SQLite's write lock with a busy timeout. Each read (`records`, `verify`, `step_states`) reads in
one transaction, so it sees one snapshot, never half of a concurrent append. Opened `read_only` in a
directory the process cannot write, where SQLite could not create the WAL index it reads through,
a journal with no `-wal` file left is read as an immutable file instead (`Journal.open` says why
that is sound).

Tables (STRICT, so a column never holds a value of another type):
    records(seq, run, kind, step, body, at, prev_hash, hash)  append-only (triggers refuse UPDATE
                                                              and DELETE); `body` is canonical JSON
                                                              and `at` a UTC ISO 8601 timestamp.
    heads(run, last_seq, last_hash)                           the last record of each run, written
                                                              in the same transaction as the append.

Hash chain, one per run. `hash = content_hash([seq, run, kind, step, body, at, prev_hash])`, taken
over the stored body text; the first record of a run has `prev_hash = GENESIS`, every later one
the `hash` of the record before it in the same run. The chain is per run, not per file, because
the run is the unit that is resumed, verified, shown and exported: verifying a run reads only its
own records, and runs sharing one file never contend for one chain tip. `seq` is global and inside
the hash, so moving a record to another position changes its hash.

What `verify` detects. An edited column: `record-altered` (the stored hash no longer matches). A
deleted, inserted or reordered record: `chain-broken` (a `prev_hash` that is not the hash before
it). A truncated tail: `head-mismatch` (the chain is whole but ends before the head does), or
`head-missing`. A row whose body is not a JSON object or lacks what its kind requires:
`malformed-record`. The chain holds no secret: whoever rewrites every hash and the head as well
is not detected; it guards against accidents, partial copies and naive edits.

Reads never trust the file. A malformed row is left out of `records()` and reported by `verify()`;
it never raises. Every `Record` a reader gets therefore has the body its kind promises (the
`RECORD_FIELDS` below). The runtime calls `verify(run)` before acting on a run and refuses to act
on a journal with problems. `append` refuses to extend a run whose last record is missing or
altered, and refuses bodies that do not fit their kind.

Folded view. `step_states(run)` replays the run's records, in order, into each step's
(state, attempts); nothing about a run is kept in memory between calls. `attempts` counts the
step's `intent` records, rollbacks (`"rollback": true`) left out. The state is the last `state` record's, with the transitions that the
effect records imply, so that a crash between two records never loses an effect:
    intent           → running           (a call is in flight)
    result           → verifying         (the call returned: never call again, check `expect`)
    outcome_unknown  → outcome_unknown
    reconciled       → verifying if it happened, else ready
and for a rollback's records (`"rollback": true`): its result, or a reconciliation saying it
happened, → compensated; a failed or not-happened rollback leaves the step's state as it was;
and, last, a step whose latest `intent` has no `result`, `attempt_failed` or `reconciled` after it
is `outcome_unknown`, whatever else was recorded (so is a step whose latest rollback intent has no
answer). `running` with no such open intent means that no
call is in flight (the runtime crashed before its intent, or the attempt failed).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

from plangate.runtime.canonical import HASH_PREFIX, canonical_json, content_hash
from plangate.runtime.errors import RunError

GENESIS = HASH_PREFIX + "0" * 64
BUSY_TIMEOUT_SECONDS = 10.0

STEP_STATES = (
    "ready",
    "waiting_for_approval",
    "running",
    "verifying",
    "succeeded",
    "failed",
    "skipped",
    "blocked",
    "outcome_unknown",
    "cancelled",
    "compensated",
)

# The fields each record kind's body must have (a body may carry more).
RECORD_FIELDS: dict[str, tuple[str, ...]] = {
    "run_started": ("mission", "plan_hash", "plan_version", "policy_hash"),
    "plan_version": ("plan_hash", "plan_version"),
    "policy": ("policy_hash",),
    "state": ("state", "reason"),
    "intent": ("tool", "args", "idempotency_key", "attempt"),
    "result": ("result", "external_ref"),
    "attempt_failed": ("error",),
    "outcome_unknown": (),
    "reconciled": ("happened", "by"),
    "approval": (
        "plan_hash",
        "plan_version",
        "tool",
        "args_hash",
        "approver",
        "role",
        "expires_at",
    ),
    "evidence": ("what", "observed", "when", "how", "proves"),
    "decision": (),
    "run_state": ("state",),
    "recheck": ("kept",),
}

# Kinds that are about one step and must name it; the others may.
STEP_KINDS = frozenset(
    {"state", "intent", "result", "attempt_failed", "outcome_unknown", "reconciled", "approval", "recheck"}
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq       INTEGER PRIMARY KEY,
    run       TEXT NOT NULL,
    kind      TEXT NOT NULL,
    step      TEXT,
    body      TEXT NOT NULL,
    at        TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS records_by_run ON records (run, seq);
CREATE TABLE IF NOT EXISTS heads (
    run       TEXT PRIMARY KEY,
    last_seq  INTEGER NOT NULL,
    last_hash TEXT NOT NULL
) STRICT;
CREATE TRIGGER IF NOT EXISTS records_are_not_updated BEFORE UPDATE ON records
BEGIN SELECT RAISE(ABORT, 'journal records are append-only'); END;
CREATE TRIGGER IF NOT EXISTS records_are_not_deleted BEFORE DELETE ON records
BEGIN SELECT RAISE(ABORT, 'journal records are append-only'); END;
"""

_COLUMNS = "seq, run, kind, step, body, at, prev_hash, hash"
_ALTERED = "its content no longer matches its hash: it was edited"
_CHAIN_BROKEN = (
    "it does not follow the record before it: a record was deleted, inserted or reordered"
)


class JournalError(RunError):
    """The journal cannot be opened or written; the message says why, for a person to read."""


class StaleHead(JournalError):
    """A compare-and-append found that the run has grown since the caller read it."""


@dataclass(frozen=True)
class Record:
    """One journal record, read back; `body` always has the fields its kind requires."""

    seq: int
    run: str
    kind: str
    step: str | None
    body: dict[str, Any]
    at: str
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class Problem:
    """Something `verify` found wrong with a run; `seq` is None for problems of the run's head."""

    run: str
    seq: int | None
    code: str
    message: str

    def __str__(self) -> str:
        where = f"run {self.run}" if self.seq is None else f"run {self.run}, record #{self.seq}"
        return f"{where}: {self.code}: {self.message}"


class StepState(NamedTuple):
    """A step's state (one of `STEP_STATES`) and how many attempts (intents) it has made."""

    state: str
    attempts: int


class _ThreadConnection:
    """A thread's connection, closed when the thread ends (its `threading.local` value is dropped
    then) or when it first uses the journal after `close` — by the thread itself, never under a
    statement another thread runs (which crashed the process). A server that runs each request on
    a new thread keeps no file open per request."""

    __slots__ = ("connection",)

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def __del__(self) -> None:
        self.connection.close()


class Journal:
    """One open journal file, usable from any thread: each thread reads and writes through its own
    SQLite connection (opened on its first use, closed when the thread ends or after `close`), so
    SQLite's own locking keeps one thread's transaction whole against another's, as between
    processes."""

    def __init__(self, connection: sqlite3.Connection, path: Path, connect: Callable[[], sqlite3.Connection]) -> None:
        self.path = path
        self._connect = connect  # another connection to the same file, set up as the first was
        self._local = threading.local()
        self._local.held = _ThreadConnection(connection)
        self._closed = False

    @property
    def _connection(self) -> sqlite3.Connection:
        """This thread's connection to the journal."""
        if self._closed:
            self._local.__dict__.pop("held", None)  # this thread's connection, if any, closes now
            raise JournalError(f"the journal {self.path} is closed")
        held = getattr(self._local, "held", None)
        if held is None:
            try:
                held = self._local.held = _ThreadConnection(self._connect())
            except (OSError, sqlite3.Error) as error:
                raise JournalError(f"cannot open the journal {self.path}: {error}") from None
        return held.connection

    @classmethod
    def open(cls, path: str | Path, *, read_only: bool = False, create: bool = True) -> Journal:
        """Open the journal at `path`: creating it and its parent directories where `create` (and not
        `read_only`); else a file that is not already a plangate journal is refused, untouched."""
        path = Path(path)
        if (read_only or not create) and not path.is_file():
            raise JournalError(f"there is no journal at {path}")
        # A reader of a WAL journal needs the `-shm` index beside it, and SQLite creates it when it
        # is missing (the last connection to close deletes it, and the `-wal` file): in a directory
        # this process cannot write (an archived journal, a read-only mount) that fails. There, if
        # no `-wal` file is left, every committed record is in the file itself, so it is opened
        # `immutable`: read as it is, without the index and without locks. A `-wal` file (a writer
        # that is open, or crashed) can only be read through the index, so then the file is opened
        # as usual (which fails if the `-shm` is missing). An immutable read is sound while nobody
        # writes the file, which takes write access to this directory (for the `-wal`): only
        # another user's process could; what it appends after the read began is not seen, and a
        # read torn by its checkpoint fails SQLite's checks or the hash chain's.
        immutable = read_only and not os.access(path.parent, os.W_OK) \
            and not path.with_name(path.name + "-wal").exists()

        def connect() -> sqlite3.Connection:  # check_same_thread: a connection may be closed by the GC elsewhere
            if read_only:
                return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro{'&immutable=1' if immutable else ''}",
                                       uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_SECONDS,
                                       check_same_thread=False)
            return sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_SECONDS, check_same_thread=False)

        def connect_again() -> sqlite3.Connection:
            connection = connect()
            connection.execute("PRAGMA synchronous=FULL")  # a setting of each connection, not of the file
            return connection

        try:
            if not read_only:
                path.parent.mkdir(parents=True, exist_ok=True)
            connection = connect()
        except (OSError, sqlite3.Error) as error:
            raise JournalError(f"cannot open the journal {path}: {error}") from None
        try:
            problem = _prepare(connection, create=create and not read_only, write=not read_only)
        except sqlite3.Error as error:
            problem = f"cannot open the journal: {error}"
        if problem:
            connection.close()
            raise JournalError(f"{path}: {problem}")
        return cls(connection, path, connect_again)

    def close(self) -> None:
        """Close the journal: this thread's connection now; another thread's when it next uses the
        journal (it is refused) or ends — never under a statement it is running."""
        self._closed = True
        self._local.__dict__.pop("held", None)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def append(self, run: str, kind: str, body: dict[str, Any], step: str | None = None, *,
               after: tuple[int, str] | None = None) -> Record:
        """Add a record at the end of `run`'s chain and commit it before returning. With `after`
        (the seq and hash of the run's last record as the caller read it), append only if that is
        still the run's last record, else raise `StaleHead`."""
        return self.append_many(run, [(kind, body, step)], after=after)[0]

    def append_many(self, run: str, entries: list[tuple[str, dict[str, Any], str | None]], *,
                    after: tuple[int, str] | None = None) -> list[Record]:
        """Add several records, `(kind, body, step)` each, at the end of `run`'s chain in one
        transaction: a crash leaves all of them or none. Checked and compared like `append`."""
        if not isinstance(run, str) or not run:
            raise JournalError(f"a run id must be a non-empty string, not {run!r}")
        prepared = []
        for kind, body, step in entries:
            if step is not None and (not isinstance(step, str) or not step):
                raise JournalError(f"a step id must be a non-empty string or None, not {step!r}")
            if not isinstance(body, dict):
                raise JournalError(f"a {kind} record's body must be a dict, not {type(body).__name__}")
            shape_problem = _shape_problem(kind, step, body)
            if shape_problem:
                raise JournalError(shape_problem)
            try:
                prepared.append((kind, step, canonical_json(body)))
            except (TypeError, ValueError) as error:
                raise JournalError(f"a {kind} record's body is not JSON: {error}") from None
        appended: list[Record] = []
        with self._transaction("IMMEDIATE"):
            if after is not None and self._head(run) != tuple(after):
                raise StaleHead(f"run {run} has grown since record #{after[0]} was read")
            prev_hash = self._chain_tip(run)
            (seq,) = self._connection.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM records"
            ).fetchone()
            for kind, step, body_text in prepared:
                at = datetime.now(timezone.utc).isoformat(timespec="microseconds")
                record_hash = content_hash([seq, run, kind, step, body_text, at, prev_hash])
                self._connection.execute(
                    f"INSERT INTO records ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (seq, run, kind, step, body_text, at, prev_hash, record_hash),
                )
                appended.append(
                    Record(seq, run, kind, step, json.loads(body_text), at, prev_hash, record_hash)
                )
                prev_hash = record_hash
                seq += 1
            if appended:
                last = appended[-1]
                self._connection.execute(
                    "INSERT INTO heads (run, last_seq, last_hash) VALUES (?, ?, ?) "
                    "ON CONFLICT (run) DO UPDATE SET last_seq = excluded.last_seq, "
                    "last_hash = excluded.last_hash",
                    (run, last.seq, last.hash),
                )
        if any(kind == "intent" for kind, _, _ in prepared):
            self._into_main_file()
        return appended

    def _into_main_file(self) -> None:
        """Copy the write-ahead log into the main file and empty it, so that an intent is in
        `journal.db` itself before its call is made: losing the log's newest frames after a crash,
        or copying the main file alone, cannot then lose it (and let the call be made again).
        Best effort, and never a wait: the commit before it is durable already, so while another
        connection still reads an older snapshot (SQLite would wait for it) the copy is skipped."""
        try:
            self._connection.execute("PRAGMA busy_timeout = 0")
            try:
                self._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                self._connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
        except sqlite3.Error:
            pass

    def records(self, run: str) -> list[Record]:
        """The run's well-formed records in order; malformed ones are left out (see `verify`)."""
        with self._transaction("DEFERRED"):
            rows = self._rows(run)
        records = []
        for row in rows:
            decoded = _decode(row)
            if isinstance(decoded, Record):
                records.append(decoded)
        return records

    def runs(self) -> list[str]:
        """Every run in the journal, in the order they started; runs left with only a head last."""
        with self._transaction("DEFERRED"):
            started = [
                run
                for (run,) in self._connection.execute(
                    "SELECT run FROM records GROUP BY run ORDER BY MIN(seq)"
                )
            ]
            headed = [
                run for (run,) in self._connection.execute("SELECT run FROM heads ORDER BY run")
            ]
        known = set(started)
        return started + [run for run in headed if run not in known]

    def verify(self, run: str | None = None) -> list[Problem]:
        """Check the hash chains and heads of one run, or of every run; [] when all is sound."""
        with self._transaction("DEFERRED"):
            runs = [run] if run is not None else self._run_ids()
            found = [(run_id, self._rows(run_id), self._head(run_id)) for run_id in runs]
        problems: list[Problem] = []
        for run_id, rows, head in found:
            problems.extend(_verify_chain(run_id, rows, head))
        return problems

    def records_since(self, run: str, seq: int, record_hash: str) -> tuple[list[Record], list[Problem]]:
        """The run's records after the one numbered `seq`, whose hash the caller read as
        `record_hash`, checked as a continuation of the chain from there and against the run's
        head; with the problems found (none when the journal grew as an append-only log should).

        Edits to records up to `seq` are not looked at again: call `verify(run)` once, then follow
        the run with this, as the runtime does within one process."""
        with self._transaction("DEFERRED"):
            rows = self._connection.execute(
                f"SELECT {_COLUMNS} FROM records WHERE run = ? AND seq > ? ORDER BY seq", (run, seq)
            ).fetchall()
            head = self._head(run)
        problems: list[Problem] = []
        records: list[Record] = []
        expected_prev_hash = record_hash
        for row in rows:
            decoded = _decode(row)
            if isinstance(decoded, str):
                problems.append(Problem(run, row[0], "malformed-record", decoded))
            elif content_hash(list(row[:7])) != row[7]:
                problems.append(Problem(run, row[0], "record-altered", _ALTERED))
            elif row[6] != expected_prev_hash:
                problems.append(Problem(run, row[0], "chain-broken", _CHAIN_BROKEN))
            else:
                records.append(decoded)
            expected_prev_hash = row[7]
        last = (rows[-1][0], rows[-1][7]) if rows else (seq, record_hash)
        if head != last:
            problems.append(Problem(run, None, "head-mismatch",
                                    f"its head is {head and '#%d' % head[0]}, but its last record is #{last[0]}"))
        return records, problems

    def step_states(self, run: str) -> dict[str, StepState]:
        """Each step's (state, attempts) folded from its records; steps with no state are absent."""
        states: dict[str, str] = {}
        attempts: dict[str, int] = {}
        open_intents: set[str] = set()
        open_rollbacks: set[str] = set()
        for record in self.records(run):
            step, kind = record.step, record.kind
            if step is None:
                continue
            rollback = record.body.get("rollback") is True
            if kind == "state":
                states[step] = record.body["state"]
            elif kind == "intent" and rollback:
                open_rollbacks.add(step)
            elif kind == "intent":
                attempts[step] = attempts.get(step, 0) + 1
                states[step] = "running"
                open_intents.add(step)
            elif kind == "result" and rollback:
                open_rollbacks.discard(step)
                states[step] = "compensated"
            elif kind == "result":
                open_intents.discard(step)
                states[step] = "verifying"
            elif kind == "attempt_failed":
                (open_rollbacks if rollback else open_intents).discard(step)
            elif kind == "outcome_unknown" and not rollback:
                states[step] = "outcome_unknown"
            elif kind == "reconciled" and rollback:
                open_rollbacks.discard(step)
                if record.body["happened"]:
                    states[step] = "compensated"
            elif kind == "reconciled":
                open_intents.discard(step)
                states[step] = "verifying" if record.body["happened"] else "ready"
        for step in open_intents | open_rollbacks:
            states[step] = "outcome_unknown"
        return {step: StepState(state, attempts.get(step, 0)) for step, state in states.items()}

    @contextmanager
    def _transaction(self, mode: str) -> Iterator[None]:
        try:
            self._connection.execute(f"BEGIN {mode}")
            try:
                yield
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
            self._connection.execute("COMMIT")
        except sqlite3.Error as error:
            if self._connection.in_transaction:
                self._connection.execute("ROLLBACK")
            raise JournalError(f"the journal {self.path} failed: {error}") from None

    def _chain_tip(self, run: str) -> str:
        """The hash a new record of `run` chains to, after checking that the tail is intact."""
        head = self._head(run)
        if head is None:
            has_records = self._connection.execute(
                "SELECT 1 FROM records WHERE run = ? LIMIT 1", (run,)
            ).fetchone()
            if has_records:
                raise JournalError(f"run {run} has records but no head; `verify` the journal")
            return GENESIS
        last_seq, last_hash = head
        tail = self._connection.execute(
            "SELECT hash FROM records WHERE seq = ? AND run = ?", (last_seq, run)
        ).fetchone()
        if tail is None or tail[0] != last_hash:
            raise JournalError(
                f"run {run}: its last record #{last_seq} is missing or altered; "
                "the journal will not extend a broken chain (`verify` it)"
            )
        return last_hash

    def _rows(self, run: str) -> list[tuple]:
        return self._connection.execute(
            f"SELECT {_COLUMNS} FROM records WHERE run = ? ORDER BY seq", (run,)
        ).fetchall()

    def _head(self, run: str) -> tuple[int, str] | None:
        return self._connection.execute(
            "SELECT last_seq, last_hash FROM heads WHERE run = ?", (run,)
        ).fetchone()

    def _run_ids(self) -> list[str]:
        return [
            run
            for (run,) in self._connection.execute(
                "SELECT run FROM records UNION SELECT run FROM heads ORDER BY run"
            )
        ]


def _prepare(connection: sqlite3.Connection, *, create: bool, write: bool) -> str | None:
    """Set the connection up (WAL, full sync, the schema when `create`); a problem, or None. A file
    opened without `create` is checked before anything is written to it."""
    if not create and not _is_journal(connection):
        return "not a plangate journal (it has no records and heads tables)"
    if create:  # an empty database becomes a journal; another application's is left as it is
        foreign = _foreign_objects(connection)
        if foreign:
            shown = ", ".join(foreign[:3]) + (", …" if len(foreign) > 3 else "")
            return f"not a plangate journal (a SQLite database with other tables: {shown})"
    if write:
        (mode,) = connection.execute("PRAGMA journal_mode=WAL").fetchone()
        if mode != "wal":
            return f"cannot put the journal in WAL mode (it stays in {mode} mode)"
    if create:
        connection.executescript(_SCHEMA)
    connection.execute("PRAGMA synchronous=FULL")
    if not _is_journal(connection):
        return "not a plangate journal (it has no records and heads tables)"
    return None


def _is_journal(connection: sqlite3.Connection) -> bool:
    return {"records", "heads"} <= _tables(connection)


_OWN_OBJECTS = {"records": ("table", ["seq", "run", "kind", "step", "body", "at", "prev_hash", "hash"]),
                "heads": ("table", ["run", "last_seq", "last_hash"]),
                "records_by_run": ("index", None), "records_are_not_updated": ("trigger", None),
                "records_are_not_deleted": ("trigger", None)}


def _foreign_objects(connection: sqlite3.Connection) -> list[str]:
    """The database's objects that a journal does not make (SQLite's own aside), and those of a
    journal's names whose kind or columns differ: what makes it another application's."""
    foreign = []
    for kind, name in connection.execute("SELECT type, name FROM sqlite_master"):
        if name.startswith("sqlite_"):
            continue
        own = _OWN_OBJECTS.get(name)
        if own is None or own[0] != kind:
            foreign.append(name)
        elif own[1] is not None:
            columns = [row[1] for row in connection.execute(f'PRAGMA table_info("{name}")')]
            if columns != own[1]:
                foreign.append(name)
    return sorted(foreign)


def _tables(connection: sqlite3.Connection) -> set[str]:
    """The database's own tables (SQLite's internal `sqlite_…` ones left out)."""
    return {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not name.startswith("sqlite_")}


def _shape_problem(kind: str, step: str | None, body: dict[str, Any]) -> str | None:
    """Why `body` does not fit a `kind` record (of `step`), or None when it does."""
    if kind not in RECORD_FIELDS:
        return f"unknown record kind {kind!r}"
    if kind in STEP_KINDS and step is None:
        return f"a {kind} record must name its step"
    missing = [field for field in RECORD_FIELDS[kind] if field not in body]
    if missing:
        return f"a {kind} record's body lacks {', '.join(missing)}"
    if kind == "state" and body["state"] not in STEP_STATES:
        return f"unknown step state {body['state']!r}"
    if kind == "run_state" and not isinstance(body["state"], str):
        return f"a run's state must be a string, not {body['state']!r}"
    if kind == "intent" and not (type(body["attempt"]) is int and body["attempt"] >= 1):
        return f"an intent's attempt must be a positive integer, not {body['attempt']!r}"
    if kind == "reconciled" and not isinstance(body["happened"], bool):
        return f"a reconciliation's `happened` must be true or false, not {body['happened']!r}"
    return None


def _column_problem(row: tuple) -> str | None:
    seq, run, kind, step, body, at, prev_hash, record_hash = row
    if not isinstance(seq, int) or not all(
        isinstance(text, str) for text in (run, kind, body, at, prev_hash, record_hash)
    ):
        return "a column holds a value of the wrong type"
    if step is not None and not isinstance(step, str):
        return "the step column holds a value of the wrong type"
    return None


def _not_json(name: str) -> None:
    """`NaN` and `Infinity`, which Python's reader takes and canonical JSON never writes."""
    raise ValueError(f"`{name}` is not JSON")


def _decode(row: tuple) -> Record | str:
    """The row as a `Record`, or why it is malformed."""
    column_problem = _column_problem(row)
    if column_problem:
        return column_problem
    seq, run, kind, step, body_text, at, prev_hash, record_hash = row
    try:
        body = json.loads(body_text, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return "the body is not JSON"
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    shape_problem = _shape_problem(kind, step, body)
    if shape_problem:
        return shape_problem
    return Record(seq, run, kind, step, body, at, prev_hash, record_hash)


def _verify_chain(run: str, rows: list[tuple], head: tuple[int, str] | None) -> list[Problem]:
    """The problems of one run's rows (in seq order) against its head; a run that has neither
    rows nor a head has none."""
    problems = []
    expected_prev_hash = GENESIS
    for row in rows:
        seq, prev_hash, stored_hash = row[0], row[6], row[7]
        decoded = _decode(row)
        if isinstance(decoded, str):
            problems.append(Problem(run, seq, "malformed-record", decoded))
        if _column_problem(row) is None:
            if content_hash(list(row[:7])) != stored_hash:
                problems.append(Problem(run, seq, "record-altered", _ALTERED))
            if prev_hash != expected_prev_hash:
                problems.append(Problem(run, seq, "chain-broken", _CHAIN_BROKEN))
        expected_prev_hash = stored_hash
    if not rows and head is None:
        return problems
    if head is None:
        problems.append(Problem(run, None, "head-missing", "the run has records but no head"))
    elif not rows:
        problems.append(
            Problem(run, None, "head-mismatch", f"its head is #{head[0]}, but it has no records")
        )
    elif (rows[-1][0], rows[-1][7]) != head:
        problems.append(
            Problem(
                run,
                None,
                "head-mismatch",
                f"it ends at #{rows[-1][0]} but its head says #{head[0]}: "
                "records at its end were deleted or replaced",
            )
        )
    return problems
