"""The journal: appends survive reopening, tampering is detected, readers never block on a writer,
and the step states fold from the records alone. Canonical JSON, which the hashes rest on, first."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from decimal import Decimal

import pytest

from plangate.runtime.canonical import canonical_json, content_hash
from plangate.runtime.journal import GENESIS, Journal, JournalError, StepState

# --- canonical JSON -------------------------------------------------------------------------------


def test_canonical_json_sorts_keys_and_drops_whitespace():
    assert canonical_json({"b": [1, 2.5, None], "a": {"y": True, "x": "é"}}) == (
        '{"a":{"x":"é","y":true},"b":[1,2.5,null]}'
    )


def test_canonical_json_is_independent_of_insertion_order():
    assert content_hash({"a": 1, "b": 2}) == content_hash({"b": 2, "a": 1})
    assert content_hash({"a": 1}).startswith("sha256:") and len(content_hash({})) == 71


def test_canonical_numbers():
    assert canonical_json([1, 1.0, 0.1, 1e20, -0.0]) == "[1,1.0,0.1,1e+20,-0.0]"
    assert canonical_json(Decimal("2.50")) == canonical_json(Decimal("25E-1")) == '"2.5"'
    assert canonical_json(Decimal("1E+2")) == '"100"'
    assert canonical_json(Decimal("-0.00")) == '"0"'
    assert canonical_json((1, "a")) == '[1,"a"]'


@pytest.mark.parametrize(
    "value, error",
    [
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (Decimal("NaN"), ValueError),
        ("\ud800", ValueError),
        ({1: "a"}, TypeError),
        ({"a": {1, 2}}, TypeError),
        (object(), TypeError),
    ],
)
def test_canonical_json_refuses_what_it_cannot_write(value, error):
    with pytest.raises(error):
        canonical_json(value)


def nested(depth: int, inside=None):
    """`inside` in `depth` lists, one inside another."""
    value = inside
    for _ in range(depth):
        value = [value]
    return value


def test_what_a_run_keeps_is_bounded_in_depth_and_size_before_any_text_is_written(monkeypatch):
    from plangate.runtime import canonical
    from plangate.runtime.canonical import MAX_KEPT_BYTES, MAX_KEPT_DEPTH, kept_json
    from plangate.syntax import MAX_NESTING

    assert MAX_KEPT_DEPTH == MAX_NESTING == 64  # a tool's value nests as deep as a plan's brackets may
    assert kept_json({"l": nested(63, "é")}) == canonical_json({"l": nested(63, "é")})
    held: list = []
    held.append(held)  # a value that holds itself is too deep, not an endless walk
    for too_deep in ({"l": nested(64)}, nested(100_000), held):
        with pytest.raises(ValueError, match="^it is nested more than 64 levels deep in lists and maps, the most a run keeps$"):
            kept_json(too_deep)
    assert len(kept_json("x" * (MAX_KEPT_BYTES - 2))) == MAX_KEPT_BYTES  # with its quotes: the bound exactly
    for too_large in ("x" * (MAX_KEPT_BYTES - 1), "é" * (MAX_KEPT_BYTES // 2), {"k" * MAX_KEPT_BYTES: 1}):
        with pytest.raises(ValueError, match="^its canonical JSON text is over 16 MiB, the most a run keeps$"):
            kept_json(too_large)
    with pytest.raises(TypeError):
        kept_json({"a": {1, 2}})

    def never(value):
        raise AssertionError("the text was written")

    monkeypatch.setattr(canonical, "canonical_json", never)
    for walked in ("x" * (4 * MAX_KEPT_BYTES), [["y" * 1024] * 1024] * 1024, nested(65)):
        with pytest.raises(ValueError):
            kept_json(walked)


def test_plain_walks_a_value_of_any_depth_without_recursion():
    """`plain` recursed two frames a level: a tool's result 600 lists deep, passed on to a step,
    ended every pass of its run in a RecursionError."""
    from plangate.cel.evaluate import Duration, Uint
    from plangate.runtime.canonical import plain

    made = plain(nested(100_000, {"u": Uint(7), "d": Duration(90 * 10**9), "b": b"ok", "t": (1, True)}))
    for _ in range(100_000):
        assert type(made) is list and len(made) == 1
        made = made[0]
    assert made == {"u": 7, "d": "90s", "b": "ok", "t": [1, True]} and type(made["u"]) is int
    assert plain({1: "a", "1": ["b"]}) == {"1": ["b"]}  # two keys that read alike: the later's value
    assert plain({"1": ["b"], 1: "a"}) == {"1": "a"}


# --- helpers --------------------------------------------------------------------------------------


@pytest.fixture
def journal_path(tmp_path):
    return tmp_path / "nested" / ".plangate" / "journal.db"


def write_sample_run(journal: Journal, run: str = "r1") -> list:
    return [
        journal.append(run, "run_started", {"mission": {"objective": "o"}, "plan_hash": "sha256:p",
                                            "plan_version": 1, "policy_hash": "sha256:q"}),
        journal.append(run, "state", {"state": "running", "reason": "started"}, step="build"),
        journal.append(run, "intent", {"tool": "ci.build", "args": {"commit": "abc"},
                                       "idempotency_key": "k1", "attempt": 1}, step="build"),
        journal.append(run, "result", {"result": {"status": "ok"}, "external_ref": "b-1"},
                       step="build"),
        journal.append(run, "state", {"state": "succeeded", "reason": "expect held"}, step="build"),
    ]


def tamper(path, *statements: str) -> None:
    """Edit the file as an outsider would: raw SQL, with the append-only triggers dropped."""
    connection = sqlite3.connect(path)
    connection.execute("DROP TRIGGER records_are_not_updated")
    connection.execute("DROP TRIGGER records_are_not_deleted")
    for statement in statements:
        connection.execute(statement)
    connection.commit()
    connection.close()


def codes(problems) -> list[tuple[int | None, str]]:
    return [(problem.seq, problem.code) for problem in problems]


# --- append and read ------------------------------------------------------------------------------


def test_append_chains_records_and_reads_them_back(journal_path):
    with Journal.open(journal_path) as journal:
        written = write_sample_run(journal)
        read = journal.records("r1")
        assert read == written
        assert [record.seq for record in read] == [1, 2, 3, 4, 5]
        assert read[0].prev_hash == GENESIS
        assert all(later.prev_hash == earlier.hash for earlier, later in zip(read, read[1:]))
        assert read[2].body["args"] == {"commit": "abc"} and read[2].step == "build"
        assert read[0].at.endswith("+00:00")
        assert journal.verify() == []


def test_the_file_is_in_wal_mode_with_bodies_stored_canonically(journal_path):
    with Journal.open(journal_path) as journal:
        journal.append("r1", "evidence", {"what": "w", "observed": {"b": 1, "a": 2}, "when": "t",
                                          "how": "http.get", "proves": "up"})
    connection = sqlite3.connect(journal_path)
    assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    (body,) = connection.execute("SELECT body FROM records").fetchone()
    assert body == '{"how":"http.get","observed":{"a":2,"b":1},"proves":"up","what":"w","when":"t"}'
    connection.close()


def test_runs_are_chained_separately_and_listed_in_start_order(journal_path):
    with Journal.open(journal_path) as journal:
        journal.append("second", "run_state", {"state": "running"})
        journal.append("first", "run_state", {"state": "running"})
        later = journal.append("second", "run_state", {"state": "succeeded"})
        assert journal.runs() == ["second", "first"]
        assert journal.records("first")[0].prev_hash == GENESIS
        assert later.prev_hash == journal.records("second")[0].hash
        assert journal.verify("second") == [] and journal.verify("missing") == []


@pytest.mark.parametrize(
    "kind, body, step, message",
    [
        ("bogus", {}, None, "unknown record kind"),
        ("state", {"state": "running"}, "s", "lacks reason"),
        ("state", {"state": "sleeping", "reason": ""}, "s", "unknown step state"),
        ("state", {"state": "ready", "reason": ""}, None, "must name its step"),
        ("intent", {"tool": "t", "args": {}, "idempotency_key": "k", "attempt": 0}, "s", "attempt"),
        ("reconciled", {"happened": "yes", "by": "ann"}, "s", "true or false"),
        ("evidence", {"what": {1, 2}, "observed": 1, "when": 1, "how": 1, "proves": 1}, None,
         "not JSON"),
    ],
)
def test_append_refuses_bodies_that_do_not_fit_their_kind(journal_path, kind, body, step, message):
    with Journal.open(journal_path) as journal:
        with pytest.raises(JournalError, match=message):
            journal.append("r1", kind, body, step=step)
        assert journal.records("r1") == []


def test_reopening_keeps_everything_and_continues_the_chain(journal_path):
    with Journal.open(journal_path) as journal:
        written = write_sample_run(journal)
    with Journal.open(journal_path) as journal:
        assert journal.records("r1") == written
        extra = journal.append("r1", "run_state", {"state": "succeeded"})
        assert extra.seq == 6 and extra.prev_hash == written[-1].hash
        assert journal.verify() == []
    with Journal.open(journal_path, read_only=True) as reader:
        assert len(reader.records("r1")) == 6 and reader.verify() == []


def test_opening_what_is_not_a_journal_is_a_clear_error(tmp_path):
    with pytest.raises(JournalError, match="no journal"):
        Journal.open(tmp_path / "absent.db", read_only=True)
    garbage = tmp_path / "garbage.db"
    garbage.write_text("this is not a database, " * 100)
    with pytest.raises(JournalError, match="cannot open"):
        Journal.open(garbage)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(JournalError, match="not a plangate journal"):
        Journal.open(other, read_only=True)
    before = other.read_bytes()
    with pytest.raises(JournalError, match="not a plangate journal \\(a SQLite database with other tables: t\\)"):
        Journal.open(other)  # as `run` opens it: another application's database is not taken over
    assert other.read_bytes() == before and not (tmp_path / "other.db-wal").exists()
    for name, schema in (("records.db", "CREATE TABLE records (id, name)"), ("view.db", "CREATE VIEW v AS SELECT 1")):
        foreign = tmp_path / name  # an application's table that has a journal's name, or a view alone
        sqlite3.connect(foreign).execute(schema).connection.close()
        before = foreign.read_bytes()
        with pytest.raises(JournalError, match="not a plangate journal"):
            Journal.open(foreign)
        assert foreign.read_bytes() == before and not (tmp_path / f"{name}-wal").exists()


def test_records_cannot_be_updated_or_deleted_through_sqlite_by_accident(journal_path):
    with Journal.open(journal_path) as journal:
        write_sample_run(journal)
    connection = sqlite3.connect(journal_path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        connection.execute("UPDATE records SET body = '{}' WHERE seq = 1")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        connection.execute("DELETE FROM records WHERE seq = 1")
    connection.close()


# --- tampering ------------------------------------------------------------------------------------


def test_an_edited_body_is_detected(journal_path):
    with Journal.open(journal_path) as journal:
        write_sample_run(journal)
        write_sample_run(journal, "untouched")
    edited = '{"idempotency_key":"k1","args":{"commit":"evil"},"attempt":1,"tool":"ci.build"}'
    tamper(journal_path, f"UPDATE records SET body = '{edited}' WHERE seq = 3")
    with Journal.open(journal_path) as journal:
        assert codes(journal.verify()) == [(3, "record-altered")]
        assert journal.verify("untouched") == []


def test_a_deleted_middle_record_is_detected(journal_path):
    with Journal.open(journal_path) as journal:
        write_sample_run(journal)
    tamper(journal_path, "DELETE FROM records WHERE seq = 3")
    with Journal.open(journal_path) as journal:
        assert codes(journal.verify("r1")) == [(4, "chain-broken")]


def test_a_truncated_tail_is_detected_and_never_extended(journal_path):
    with Journal.open(journal_path) as journal:
        write_sample_run(journal)
    tamper(journal_path, "DELETE FROM records WHERE seq = 5")
    with Journal.open(journal_path) as journal:
        problems = journal.verify("r1")
        assert codes(problems) == [(None, "head-mismatch")]
        assert "ends at #4 but its head says #5" in str(problems[0])
        with pytest.raises(JournalError, match="will not extend a broken chain"):
            journal.append("r1", "run_state", {"state": "running"})


def test_a_run_whose_records_and_head_disagree_entirely_is_detected(journal_path):
    with Journal.open(journal_path) as journal:
        write_sample_run(journal, "emptied")
        write_sample_run(journal, "headless")
    tamper(
        journal_path,
        "DELETE FROM records WHERE run = 'emptied'",
        "DELETE FROM heads WHERE run = 'headless'",
    )
    with Journal.open(journal_path) as journal:
        assert journal.runs() == ["headless", "emptied"]
        assert [(problem.run, problem.code) for problem in journal.verify()] == [
            ("emptied", "head-mismatch"),
            ("headless", "head-missing"),
        ]
        with pytest.raises(JournalError, match="no head"):
            journal.append("headless", "run_state", {"state": "running"})


def test_swapping_two_records_is_detected(journal_path):
    with Journal.open(journal_path) as journal:
        write_sample_run(journal)
    tamper(
        journal_path,
        "UPDATE records SET seq = 100 WHERE seq = 2",
        "UPDATE records SET seq = 2 WHERE seq = 3",
        "UPDATE records SET seq = 3 WHERE seq = 100",
    )
    with Journal.open(journal_path) as journal:
        assert codes(journal.verify()) == [
            (2, "record-altered"),
            (2, "chain-broken"),
            (3, "record-altered"),
            (3, "chain-broken"),
            (4, "chain-broken"),
        ]


def test_a_malformed_body_is_a_problem_not_an_exception(journal_path):
    with Journal.open(journal_path) as journal:
        write_sample_run(journal)
    tamper(
        journal_path,
        "UPDATE records SET body = 'not json' WHERE seq = 2",
        "UPDATE records SET body = '[1]' WHERE seq = 4",
    )
    with Journal.open(journal_path) as journal:
        problems = journal.verify()
        assert codes(problems) == [
            (2, "malformed-record"),
            (2, "record-altered"),
            (4, "malformed-record"),
            (4, "record-altered"),
        ]
        assert "not JSON" in problems[0].message and "not a JSON object" in problems[2].message
        assert [record.seq for record in journal.records("r1")] == [1, 3, 5]
        # the unreadable result leaves the intent open: the fold errs towards "do not call again"
        assert journal.step_states("r1") == {"build": StepState("outcome_unknown", 1)}


# --- concurrency ----------------------------------------------------------------------------------


def test_readers_see_committed_snapshots_while_another_connection_writes(journal_path):
    records_to_write = 60
    with Journal.open(journal_path) as journal:
        journal.append("r1", "run_state", {"state": "running"})
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with Journal.open(journal_path) as writer:
                for index in range(records_to_write):
                    writer.append("r1", "decision", {"index": index}, step=f"s{index % 3}")
        except BaseException as error:  # reported to the main thread below
            errors.append(error)

    writer_thread = threading.Thread(target=write)
    seen_counts = []
    with Journal.open(journal_path) as reader, Journal.open(journal_path, read_only=True) as other:
        writer_thread.start()
        while writer_thread.is_alive():
            assert reader.verify() == []
            seen_counts.append(len(other.records("r1")))
        writer_thread.join()
        assert not errors
        assert len(reader.records("r1")) == records_to_write + 1 and reader.verify() == []
    assert seen_counts == sorted(seen_counts)


def test_an_open_write_transaction_does_not_block_readers(journal_path):
    with Journal.open(journal_path) as journal:
        write_sample_run(journal)
    writer = sqlite3.connect(journal_path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO heads VALUES ('uncommitted', 1, 'x')")
    with Journal.open(journal_path, read_only=True) as reader:
        assert reader.runs() == ["r1"] and reader.verify() == []
    writer.execute("ROLLBACK")
    writer.close()


# --- folded step states ---------------------------------------------------------------------------


def intent(attempt: int) -> dict:
    return {"tool": "t", "args": {}, "idempotency_key": "k", "attempt": attempt}


def test_step_states_fold_from_the_records(journal_path):
    with Journal.open(journal_path) as journal:
        write_sample_run(journal)
        journal.append("r1", "state", {"state": "running", "reason": ""}, step="flaky")
        journal.append("r1", "intent", intent(1), step="flaky")
        journal.append("r1", "attempt_failed", {"error": "RuntimeError: boom"}, step="flaky")
        journal.append("r1", "intent", intent(2), step="flaky")
        journal.append("r1", "result", {"result": 1, "external_ref": None}, step="flaky")
        journal.append("r1", "state", {"state": "waiting_for_approval", "reason": ""}, step="gate")
        journal.append("r1", "approval", {"plan_hash": "h", "plan_version": 1, "tool": "t",
                                          "args_hash": "a", "approver": "ann", "role": "operator",
                                          "expires_at": None}, step="untouched")
        assert journal.step_states("r1") == {
            "build": StepState("succeeded", 1),
            "flaky": StepState("verifying", 2),
            "gate": StepState("waiting_for_approval", 0),
        }


def test_an_intent_with_no_outcome_is_an_unknown_outcome_until_reconciled(journal_path):
    with Journal.open(journal_path) as journal:
        journal.append("r1", "state", {"state": "running", "reason": ""}, step="pay")
        journal.append("r1", "intent", intent(1), step="pay")
        assert journal.step_states("r1") == {"pay": StepState("outcome_unknown", 1)}
        journal.append("r1", "outcome_unknown", {}, step="pay")
        journal.append("r1", "state", {"state": "cancelled", "reason": "operator"}, step="pay")
        assert journal.step_states("r1")["pay"].state == "outcome_unknown"
        journal.append("r1", "reconciled", {"happened": False, "by": "ann"}, step="pay")
        assert journal.step_states("r1") == {"pay": StepState("ready", 1)}
        journal.append("r1", "intent", intent(2), step="pay")
        journal.append("r1", "reconciled", {"happened": True, "by": "hook"}, step="pay")
        assert journal.step_states("r1") == {"pay": StepState("verifying", 2)}


def test_record_bodies_are_plain_json(journal_path):
    with Journal.open(journal_path) as journal:
        record = journal.append("r1", "result", {"result": {"amount": Decimal("2.50"),
                                                            "ids": ("a", "b")},
                                                 "external_ref": "x"}, step="s")
        assert record.body == {"result": {"amount": "2.5", "ids": ["a", "b"]}, "external_ref": "x"}
        assert json.loads(canonical_json(record.body)) == journal.records("r1")[0].body


def test_a_compare_and_append_writes_only_on_the_head_it_was_given(journal_path):
    from plangate.runtime.journal import StaleHead

    with Journal.open(journal_path) as journal:
        first = journal.append("r", "run_started", {"mission": {}, "plan_hash": "h", "plan_version": 1,
                                                   "policy_hash": "p"})
        second = journal.append("r", "run_state", {"state": "paused"}, after=(first.seq, first.hash))
        with pytest.raises(StaleHead, match="has grown since record #1"):
            journal.append("r", "run_state", {"state": "running"}, after=(first.seq, first.hash))
        assert [r.seq for r in journal.records("r")] == [first.seq, second.seq]
        assert journal.verify("r") == []


def test_opening_without_create_leaves_a_missing_or_foreign_file_as_it_was(tmp_path):
    missing = tmp_path / "nowhere" / "journal.db"
    with pytest.raises(JournalError, match="there is no journal"):
        Journal.open(missing, create=False)
    assert not missing.parent.exists()
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(JournalError, match="not a plangate journal"):
        Journal.open(empty, create=False)
    assert empty.read_bytes() == b""


def test_an_intent_is_copied_into_the_main_file_without_waiting_for_a_reader(tmp_path):
    import time

    path = tmp_path / "journal.db"
    journal = Journal.open(path)
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM records").fetchall()  # holds a snapshot
    started = time.perf_counter()
    journal.append("r", "intent", {"tool": "a.b", "args": {}, "idempotency_key": "k", "attempt": 1}, step="s")
    assert time.perf_counter() - started < 2.0  # the busy timeout is 10 s
    reader.execute("COMMIT")
    journal.append("r", "intent", {"tool": "a.b", "args": {}, "idempotency_key": "k", "attempt": 2}, step="s")
    assert (tmp_path / "journal.db-wal").stat().st_size == 0  # emptied into the main file
    journal.close()


def test_each_thread_has_its_own_connection_closed_when_the_thread_ends(tmp_path):
    """A server that answers each request on a new thread keeps no file open per request; a closed
    journal refuses every thread."""
    import os

    journal = Journal.open(tmp_path / "journal.db")
    journal.append("r1", "run_started", {"mission": {}, "plan_hash": "h", "plan_version": 1, "policy_hash": "p"})
    open_files = len(os.listdir("/proc/self/fd"))
    seen: list[int] = []
    for _ in range(40):
        thread = threading.Thread(target=lambda: seen.append(len(journal.records("r1"))))
        thread.start()
        thread.join()
    assert seen == [1] * 40 and len(os.listdir("/proc/self/fd")) <= open_files + 2
    journal.close()
    for reader in (lambda: journal.records("r1"), lambda: journal.runs()):
        with pytest.raises(JournalError, match="is closed"):
            reader()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to a read-only directory: permissions do not apply")
def test_a_journal_in_a_directory_that_cannot_be_written_is_still_read(tmp_path):
    """A WAL journal is read through its `-shm` index, which SQLite creates beside it when it is
    missing: in a read-only directory reading failed ("attempt to write a readonly database").
    With no `-wal` file left, the journal is read as an immutable file; with one, it needs the
    index, and is refused if the `-shm` cannot be made."""
    folder = tmp_path / "archive"
    folder.mkdir()
    path = folder / "journal.db"
    with Journal.open(path) as journal:
        written = write_sample_run(journal)
    assert sorted(os.listdir(folder)) == ["journal.db"]  # the last connection removed the -wal and -shm
    os.chmod(folder, 0o555)
    try:
        with Journal.open(path, read_only=True) as journal:
            assert journal.records("r1") == written and journal.verify("r1") == []
            assert journal.step_states("r1") == {"build": StepState("succeeded", 1)}
        assert sorted(os.listdir(folder)) == ["journal.db"]
        os.chmod(folder, 0o755)
        (folder / "journal.db-wal").write_bytes(b"")  # a writer still open, or one that crashed
        os.chmod(folder, 0o555)
        with pytest.raises(JournalError, match="cannot open the journal"):
            Journal.open(path, read_only=True)
    finally:
        os.chmod(folder, 0o755)
