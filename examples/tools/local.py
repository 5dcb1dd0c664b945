"""Demo tools for the example plans: every tool they call, acting on a local folder.

    plangate run examples/deploy.plan --policy policies/baseline.policy --tools examples/tools/local.py

The folder is `$PLANGATE_DEMO_DIR` (default `.plangate/demo`, read at every call). Files stand for
the outside world: `deployments/<id>.json` preview deployments, `dns/<host>.json` DNS records,
`tickets/`, `refunds/`, `snapshots/`, `chat/<channel>/<id>.json` chat posts, `pages/` incidents,
`emails/`, `notes/` saved notes, `db/<database>-<env>.json` a database's schema, and the inputs the
reads look at: `orders/`, `charges/`, `metrics.json` (checkout's error rate, which decides the
triage branch) and `search/<query>.json` (search results; canned ones when absent). Missing inputs
are seeded on first use, so a fresh clone works and a person may edit them to steer a run.

Writes are idempotent on their key (`_effect`). An effect is named by (tool, idempotency key):
- the first call with a key acts, then commits: it appends one line to `ledger.jsonl`
  (`{"tool", "key", "args", "result"}`, one `write()` on an O_APPEND file, so the line is there
  whole or not at all when the process dies), then stores `effects/<tool>/<hash of key>.json`;
- a later call with that key returns the stored result and acts no more; with other arguments it
  raises (one key names one effect, as payment APIs do);
- each write's `@….reconcile` hook answers the runtime after a crash: the stored result if the
  effect happened, None if it did not. It reads the effect file, and the ledger when the process
  died between the two writes of the commit.
So `ledger.jsonl` has exactly one line per real effect: the external truth the crash tests check
the journal against. An effect's act only writes files named by the key or the arguments and
derives every id from the key, so acting again after a death before the commit changes nothing.

Reads change nothing. Their hook answers None ("no effect happened"), which tells the runtime
that calling again is safe, so a run killed during a read goes on without a person.

One lock serialises the effects of one process (the runtime calls tools from a thread pool); two
processes must not act on one folder at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from plangate import tool

DEMO_DIR_ENV = "PLANGATE_DEMO_DIR"
DEFAULT_DEMO_DIR = os.path.join(".plangate", "demo")
LEDGER = "ledger.jsonl"

_LOCK = threading.Lock()

# What the reads find in a fresh folder (written once, then left to whoever edits them).
_SEEDS: dict[str, Any] = {
    "db/orders-prod.json": {"version": 41, "tables": {"orders": {
        "id": "NO", "customer_id": "NO", "total": "NO", "created_at": "NO"}}},
    "orders/88231.json": {"order_id": "88231", "status": "delivered", "charge_id": "ch_3PqX88231",
                          "customer_email": "c-5120@example.com", "total": 49.99},
    "charges/ch_3PqX88231.json": {"charge_id": "ch_3PqX88231", "captured": True, "amount": 49.99,
                                  "currency": "USD"},
    "metrics.json": {"service": "checkout", "error_rate": 0.02},
}
_MIGRATIONS = {"0042_add_refund_reason": (42, "orders", "refund_reason")}
_SNAPSHOT_QUOTA = 5


# ---------------------------------------------------------------- the folder
def demo_dir() -> Path:
    return Path(os.environ.get(DEMO_DIR_ENV) or DEFAULT_DEMO_DIR)


def _world() -> Path:
    root = demo_dir()
    for name, value in _SEEDS.items():
        if not (root / name).exists():
            _write(root / name, value)
    return root


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _write(path: Path, value: Any) -> None:
    """Replace the file at once (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def _find(path: Path, what: str) -> Any:
    if not path.is_file():
        raise LookupError(f"there is no {what}")
    return _read(path)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "_"


def _ident(prefix: str, key: str) -> str:
    """An id derived from the idempotency key alone: the same key always names the same thing."""
    return prefix + hashlib.sha256(key.encode("utf-8")).hexdigest()[:10]


def _given(**args: Any) -> dict[str, Any]:
    """The call's arguments as the plan gave them (optional ones it left out are not recorded)."""
    return {name: value for name, value in args.items() if value is not None}


# ---------------------------------------------------------------- effects and the ledger
def _effect_file(root: Path, tool_name: str, key: str) -> Path:
    return root / "effects" / tool_name / (hashlib.sha256(key.encode("utf-8")).hexdigest()[:32] + ".json")


def _recorded(root: Path, tool_name: str, key: str) -> dict[str, Any] | None:
    """The committed effect named by (tool, key): its file, else its ledger line; None if none."""
    path = _effect_file(root, tool_name, key)
    if path.is_file():
        return _read(path)
    ledger = root / LEDGER
    if ledger.is_file():
        for line in ledger.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if entry["tool"] == tool_name and entry["key"] == key:
                return entry
    return None


def _effect(tool_name: str, key: str, args: dict[str, Any], act: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Perform `act` once for (tool, key) and commit it; a repeated key returns the first result."""
    with _LOCK:
        root = _world()
        earlier = _recorded(root, tool_name, key)
        if earlier is not None:
            if earlier["args"] != args:
                raise ValueError(f"idempotency key {key!r} of {tool_name} was used with other arguments: "
                                 f"{json.dumps(earlier['args'], sort_keys=True)}")
            return earlier["result"]
        result = act(root)
        entry = {"tool": tool_name, "key": key, "args": args, "result": result}
        line = (json.dumps(entry, sort_keys=True) + "\n").encode("utf-8")
        descriptor = os.open(root / LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)
        _write(_effect_file(root, tool_name, key), entry)
        return result


def _reconciler(tool_name: str) -> Callable[[str], dict[str, Any] | None]:
    def reconcile(idempotency_key: str) -> dict[str, Any] | None:
        with _LOCK:
            found = _recorded(_world(), tool_name, idempotency_key)
        return None if found is None else found["result"]

    reconcile.__name__ = reconcile.__qualname__ = "reconcile_" + tool_name.replace(".", "_")
    return reconcile


def _no_effect(idempotency_key: str) -> None:
    """The hook of a read: it changed nothing, so nothing happened and calling again is safe."""
    return None


def read_only(name: str) -> Callable[[Callable[..., Any]], Any]:
    """`@tool(name)` for a tool that changes nothing, with the hook that says so."""
    def register(function: Callable[..., Any]) -> Any:
        registered = tool(name)(function)
        registered.reconcile(_no_effect)
        return registered
    return register


def writes(name: str) -> Callable[[Callable[..., Any]], Any]:
    """`@tool(name)` for an effect, with the hook that looks its key up."""
    def register(function: Callable[..., Any]) -> Any:
        registered = tool(name)(function)
        registered.reconcile(_reconciler(name))
        return registered
    return register


# ---------------------------------------------------------------- CI and deployments
@read_only("ci.build")
def build(commit: str) -> dict:
    return {"status": "ok", "commit": commit, "artifact": f"web-{commit}.tar"}


@read_only("ci.test")
def run_tests(commit: str, suite: str | None = None) -> dict:
    return {"commit": commit, "suite": suite or "all", "passed": 412, "failed": 0}


@writes("deploy.preview")
def preview(artifact: str, idempotency_key: str) -> dict:
    def act(root: Path) -> dict:
        deployment = _ident("pv-", idempotency_key)
        commit = artifact.removeprefix("web-").removesuffix(".tar")
        _write(root / "deployments" / f"{deployment}.json",
               {"id": deployment, "artifact": artifact, "commit": commit})
        return {"id": deployment, "url": f"https://{deployment}.preview.example.com", "artifact": artifact}
    return _effect("deploy.preview", idempotency_key, _given(artifact=artifact), act)


@writes("deploy.delete_preview")
def delete_preview(id: str, idempotency_key: str) -> dict:
    def act(root: Path) -> dict:
        path = root / "deployments" / f"{_slug(id)}.json"
        existed = path.is_file()
        path.unlink(missing_ok=True)
        return {"id": id, "deleted": existed}
    return _effect("deploy.delete_preview", idempotency_key, _given(id=id), act)


@read_only("deploy.history")
def history(service: str, max_entries: int | None = None) -> dict:
    folder = _world() / "deployments"
    entries = [_read(path) for path in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    return {"service": service, "entries": entries[: max_entries or 10]}


@writes("dns.route")
def route(host: str, target: str, idempotency_key: str) -> dict:
    """Point `host` at a deployment; the empty target removes the record."""
    def act(root: Path) -> dict:
        path = root / "dns" / f"{_slug(host)}.json"
        previous = _read(path)["target"] if path.is_file() else ""
        if target:
            _write(path, {"host": host, "target": target})
        else:
            path.unlink(missing_ok=True)
        return {"ref": f"dns:{host}", "host": host, "target": target, "previous_target": previous,
                "changed": previous != target}
    return _effect("dns.route", idempotency_key, _given(host=host, target=target), act)


@read_only("http.get")
def http_get(url: str) -> dict:
    """Preview hosts and routed hosts answer from the folder; any other URL is a canned 200."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    root = _world()
    deployment = None
    if host.endswith(".preview.example.com"):
        deployment = host.split(".", 1)[0]
    elif host.endswith(".example.com"):
        record = root / "dns" / f"{_slug(host)}.json"
        if not record.is_file():
            return {"status": 404, "url": url, "body": f"no DNS record for {host}"}
        deployment = _read(record)["target"]
    else:
        return {"status": 200, "url": url, "body": {"status": {"indicator": "none"}, "source": host}}
    path = root / "deployments" / f"{_slug(deployment)}.json"
    if not path.is_file():
        return {"status": 502, "url": url, "body": f"deployment {deployment} is not running"}
    commit = _read(path)["commit"]
    body = f"web {commit}" if parts.path == "/version" else "ok"
    return {"status": 200, "url": url, "body": body}


# ---------------------------------------------------------------- chat
@writes("chat.post")
def post(channel: str, text: str, idempotency_key: str) -> dict:
    def act(root: Path) -> dict:
        message = _ident("msg-", idempotency_key)
        _write(root / "chat" / _slug(channel) / f"{message}.json", {"id": message, "channel": channel, "text": text})
        return {"id": message, "channel": channel}
    return _effect("chat.post", idempotency_key, _given(channel=channel, text=text), act)


@read_only("chat.get_message")
def get_message(channel: str, id: str) -> dict:
    return _find(_world() / "chat" / _slug(channel) / f"{_slug(id)}.json", f"message {id} in {channel}")


# ---------------------------------------------------------------- databases
def _database(root: Path, database: str, env: str) -> tuple[Path, dict]:
    path = root / "db" / f"{_slug(database)}-{_slug(env)}.json"
    return path, _find(path, f"database {database} in {env}")


@read_only("db.schema_version")
def schema_version(database: str, env: str) -> dict:
    _, schema = _database(_world(), database, env)
    return {"database": database, "env": env, "version": schema["version"]}


def _snapshots(root: Path, database: str, env: str) -> list[dict]:
    folder = root / "snapshots"
    found = [_read(path) for path in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    return [s for s in found if s["database"] == database and s["env"] == env]


@read_only("db.list_snapshots")
def list_snapshots(database: str, env: str) -> dict:
    snapshots = _snapshots(_world(), database, env)
    return {"snapshots": [s["id"] for s in snapshots], "quota_left": _SNAPSHOT_QUOTA - len(snapshots)}


@writes("db.snapshot")
def snapshot(database: str, env: str, label: str, idempotency_key: str) -> dict:
    def act(root: Path) -> dict:
        _, schema = _database(root, database, env)
        snapshot_id = _ident("snap-", idempotency_key)
        record = {"id": snapshot_id, "database": database, "env": env, "label": label,
                  "version": schema["version"], "state": "complete", "size_bytes": 52_428_800}
        _write(root / "snapshots" / f"{snapshot_id}.json", record)
        return {"snapshot_id": snapshot_id, "state": "complete"}
    return _effect("db.snapshot", idempotency_key, _given(database=database, env=env, label=label), act)


@writes("db.expire_snapshot")
def expire_snapshot(id: str, days: int, idempotency_key: str) -> dict:
    def act(root: Path) -> dict:
        path = root / "snapshots" / f"{_slug(id)}.json"
        record = _find(path, f"snapshot {id}")
        _write(path, {**record, "expires_in_days": days})
        return {"id": id, "expires_in_days": days}
    return _effect("db.expire_snapshot", idempotency_key, _given(id=id, days=days), act)


@read_only("db.get_snapshot")
def get_snapshot(id: str) -> dict:
    return _find(_world() / "snapshots" / f"{_slug(id)}.json", f"snapshot {id}")


@read_only("db.migrate_dry_run")
def migrate_dry_run(database: str, env: str, migration: str) -> dict:
    _database(_world(), database, env)
    errors = [] if migration in _MIGRATIONS else [f"no migration named {migration}"]
    return {"migration": migration, "errors": errors, "locks_longer_than_1s": 0}


@writes("db.migrate")
def migrate(database: str, env: str, migration: str, idempotency_key: str) -> dict:
    def act(root: Path) -> dict:
        if migration not in _MIGRATIONS:
            raise LookupError(f"no migration named {migration}")
        version, table, column = _MIGRATIONS[migration]
        path, schema = _database(root, database, env)
        schema["tables"].setdefault(table, {})[column] = "YES"
        _write(path, {**schema, "version": version})
        return {"migration": migration, "version": version}
    return _effect("db.migrate", idempotency_key, _given(database=database, env=env, migration=migration), act)


@read_only("db.query")
def query(database: str, env: str, sql: str) -> dict:
    """Two shapes of SELECT are understood: a column's nullability, and anything else as a count."""
    _, schema = _database(_world(), database, env)
    if "information_schema.columns" in sql:
        table = re.search(r"table_name\s*=\s*'([^']*)'", sql)
        column = re.search(r"column_name\s*=\s*'([^']*)'", sql)
        columns = schema["tables"].get(table.group(1) if table else "", {})
        name = column.group(1) if column else ""
        return {"rows": [{"is_nullable": columns[name]}] if name in columns else []}
    return {"rows": [{"n": 0}]}


# ---------------------------------------------------------------- incidents and tickets
@read_only("metrics.query")
def metrics_query(query: str, window: str) -> dict:
    return {"query": query, "window": window, "error_rate": _read(_world() / "metrics.json")["error_rate"]}


@read_only("logs.search")
def logs_search(service: str, query: str, since: str) -> dict:
    return {"service": service, "count": 3, "top_messages": [
        "upstream payments-gateway timed out after 5000ms", "POST /checkout 502", "retry budget exhausted"]}


@read_only("llm.summarize")
def summarize(documents: list, instructions: str, max_words: int | None = None) -> dict:
    """A stand-in summary: the first words of each document, citing it by number."""
    per_document = max(1, (max_words or 150) // max(1, len(documents)) - 1)
    lines = [" ".join(_words(document)[:per_document]) + f" [{number}]" for number, document in enumerate(documents, 1)]
    return {"text": "\n".join(lines), "documents": len(documents)}


def _words(value: Any) -> list[str]:
    """The words of the strings in a JSON value, in order."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, dict):
        return [word for key in sorted(value) for word in _words(value[key])]
    if isinstance(value, list):
        return [word for item in value for word in _words(item)]
    return [json.dumps(value)]


@read_only("text.check_citations")
def check_citations(text: str, sources: list) -> dict:
    """A claim is the text up to a citation `[n]`; text after the last citation is unsupported."""
    *claims, rest = re.split(r"\[\d+\]", text)
    return {"claims": len(claims), "unsupported_claims": 1 if rest.strip() else 0}


@writes("pager.page")
def page(service: str, severity: str, summary: str, idempotency_key: str) -> dict:
    def act(root: Path) -> dict:
        incident = _ident("PINC-", idempotency_key)
        _write(root / "pages" / f"{incident}.json", {"id": incident, "service": service, "severity": severity,
                                                     "summary": summary, "state": "triggered"})
        return {"incident_id": incident}
    return _effect("pager.page", idempotency_key, _given(service=service, severity=severity, summary=summary), act)


@read_only("pager.get_incident")
def get_incident(id: str) -> dict:
    return _find(_world() / "pages" / f"{_slug(id)}.json", f"incident {id}")


@writes("tickets.create")
def create_ticket(project: str, title: str, body: str, idempotency_key: str) -> dict:
    def act(root: Path) -> dict:
        ticket = _ident(f"{_slug(project)}-", idempotency_key)
        _write(root / "tickets" / f"{ticket}.json",
               {"id": ticket, "project": project, "title": title, "body": body, "status": "open"})
        return {"id": ticket}
    return _effect("tickets.create", idempotency_key, _given(project=project, title=title, body=body), act)


@writes("tickets.close")
def close_ticket(id: str, idempotency_key: str, reason: str | None = None) -> dict:
    def act(root: Path) -> dict:
        path = root / "tickets" / f"{_slug(id)}.json"
        _write(path, {**_find(path, f"ticket {id}"), "status": "closed", "close_reason": reason or ""})
        return {"id": id, "status": "closed"}
    return _effect("tickets.close", idempotency_key, _given(id=id, reason=reason), act)


@read_only("tickets.get")
def get_ticket(id: str) -> dict:
    return _find(_world() / "tickets" / f"{_slug(id)}.json", f"ticket {id}")


# ---------------------------------------------------------------- orders, payments and email
@read_only("orders.get")
def get_order(order_id: str) -> dict:
    return _find(_world() / "orders" / f"{_slug(order_id)}.json", f"order {order_id}")


def _refunds(root: Path) -> list[dict]:
    folder = root / "refunds"
    return [_read(path) for path in sorted(folder.glob("*.json"))] if folder.is_dir() else []


@read_only("payments.get_charge")
def get_charge(charge_id: str) -> dict:
    root = _world()
    charge = _find(root / "charges" / f"{_slug(charge_id)}.json", f"charge {charge_id}")
    refunded = sum(r["amount"] for r in _refunds(root) if r["charge_id"] == charge_id)
    return {**charge, "amount_refunded": round(float(refunded), 2)}


@writes("payments.refund")
def refund(charge_id: str, amount: float, currency: str, idempotency_key: str, reason: str | None = None) -> dict:
    def act(root: Path) -> dict:
        charge = _find(root / "charges" / f"{_slug(charge_id)}.json", f"charge {charge_id}")
        refunded = sum(r["amount"] for r in _refunds(root) if r["charge_id"] == charge_id)
        if refunded + amount > charge["amount"] + 1e-9:
            raise ValueError(f"a refund of {amount} would exceed what charge {charge_id} has left")
        refund_id = _ident("re_", idempotency_key)
        _write(root / "refunds" / f"{refund_id}.json", {"refund_id": refund_id, "charge_id": charge_id, "amount": amount,
                                                        "currency": currency, "reason": reason or "", "status": "succeeded"})
        return {"refund_id": refund_id, "status": "succeeded"}
    return _effect("payments.refund", idempotency_key,
                   _given(charge_id=charge_id, amount=amount, currency=currency, reason=reason), act)


@read_only("payments.get_refund")
def get_refund(id: str) -> dict:
    found = _find(_world() / "refunds" / f"{_slug(id)}.json", f"refund {id}")
    return {"id": id, "status": found["status"], "amount": found["amount"]}


@writes("email.send")
def send_email(to: str, template: str, idempotency_key: str, vars: dict | None = None) -> dict:
    def act(root: Path) -> dict:
        message = _ident("em-", idempotency_key)
        _write(root / "emails" / f"{message}.json",
               {"id": message, "to": to, "template": template, "vars": vars or {}, "state": "sent"})
        return {"message_id": message}
    return _effect("email.send", idempotency_key, _given(to=to, template=template, vars=vars), act)


@read_only("email.get_status")
def email_status(id: str) -> dict:
    found = _find(_world() / "emails" / f"{_slug(id)}.json", f"email {id}")
    return {"id": id, "state": found["state"]}


# ---------------------------------------------------------------- research and notes
@read_only("web.search")
def search(query: str, max_results: int | None = None) -> dict:
    """The results stored in `search/<query>.json`, else three canned ones."""
    stored = _world() / "search" / f"{_slug(query)}.json"
    if stored.is_file():
        items = _read(stored)
    else:
        items = [{"title": f"Result {n} for {query}", "url": f"https://search.example/{_slug(query)}/{n}"}
                 for n in range(1, 4)]
    return {"query": query, "items": items[: max_results or 10]}


@read_only("web.fetch")
def fetch(url: str) -> dict:
    return {"status": 200, "url": url, "text": f"The demo's stand-in for {url}."}


def _note(root: Path, path: str) -> Path:
    return root / "notes" / _slug(path)


@writes("notes.save")
def save_note(path: str, text: str, idempotency_key: str) -> dict:
    def act(root: Path) -> dict:
        note = _note(root, path)
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(text, encoding="utf-8")
        return {"path": path, "bytes": len(text.encode("utf-8"))}
    return _effect("notes.save", idempotency_key, _given(path=path, text=text), act)


@writes("notes.delete")
def delete_note(path: str, idempotency_key: str) -> dict:
    def act(root: Path) -> dict:
        note = _note(root, path)
        existed = note.is_file()
        note.unlink(missing_ok=True)
        return {"path": path, "deleted": existed}
    return _effect("notes.delete", idempotency_key, _given(path=path), act)


@read_only("notes.get")
def get_note(path: str) -> dict:
    note = _note(_world(), path)
    if not note.is_file():
        raise LookupError(f"there is no note {path}")
    return {"path": path, "text": note.read_text(encoding="utf-8")}
