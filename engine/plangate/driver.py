"""The driver: composes the stages for `plangate check` and the Python API.

    read → parse+lower (syntax) → compile policies → per plan: graph → checks → sorted diagnostics

Options: `announce_no_policy` adds one `no-policy` note when plans are checked without a policy
(the text report shows it; machine formats leave it out, so a clean plan gives no diagnostics).

Each stage is a function from one typed value to the next; the driver only sequences them, times
them (for the benchmarks), and turns any failure into a diagnostic: a check that raises yields one
`internal-error` for that check and the others still run. Nothing here renders.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import select
import stat
import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from plangate.checks import PLAN_CHECKS, POLICY_CHECKS, Check
from plangate.checks.context import PlanContext, PolicyContext
from plangate.diagnostics import Diagnostic, Label, Severity, backticked, diagnostic
from plangate.graph import build_graph
from plangate.ir.nodes import Document, Plan, Policy
from plangate.policy.compiled import CompiledPolicy, compile_policies
from plangate.smt import solve
from plangate.source import SourceFile, SourceMap, Span
from plangate.syntax import MAX_INPUT_CHARS, parse_source

# Seconds of solver time one plan's checks may take in all (each query has its own, smaller bound).
SOLVER_TOTAL_BOUND = solve.TOTAL_BOUND
MAX_AFTER_EDGES = 200_000  # `after` names in one plan (a dense plan of 2,250 steps had 2.5 million: 34 s, 2.4 GB)

# Diagnostics that mean the command could not do its job (exit code 2), not that the plan is bad.
FAILURE_NAMES = frozenset({"unreadable-input", "internal-error", "budget-unknown"})


@dataclass
class CheckResult:
    diagnostics: list[Diagnostic]
    sources: SourceMap
    files: list[str]  # every input: plan files, then policy files
    plans: list[Plan] = field(default_factory=list)
    policies: list[Policy] = field(default_factory=list)
    policy: CompiledPolicy | None = None
    timings: dict[str, float] = field(default_factory=dict)
    plan_files: list[str] = field(default_factory=list)
    policy_set: list[SourceFile] = field(default_factory=list)  # the policy texts compiled, each once (`policy_set`)

    @property
    def checked_files(self) -> list[str]:
        """What a summary counts: the files checked (the plans); policies given with them are the
        yardstick, not the subject (the contract's JSON example: one plan, `"files": 1`)."""
        return self.plan_files or self.files

    @property
    def errors(self) -> int:
        return sum(1 for d in self.diagnostics if d.severity is Severity.ERROR)

    @property
    def warnings(self) -> int:
        return sum(1 for d in self.diagnostics if d.severity is Severity.WARNING)

    def to_dict(self) -> dict:
        """The object `plangate check --format json` prints (spec §5): each diagnostic with its file,
        1-based lines and columns, notes and help, and the summary."""
        from plangate.diagnostics.render import json_document

        return json_document(self.diagnostics, self.sources, files=self.checked_files)

    def exit_code(self, strict: bool = False) -> int:
        """0 nothing at error level, 1 errors (or warnings with `strict`), 2 the check could not
        do its job (an unreadable input, a solver failure), as `plangate check` exits."""
        if any(d.name in FAILURE_NAMES and d.severity is Severity.ERROR for d in self.diagnostics):
            return 2
        if self.errors or (strict and self.warnings):
            return 1
        return 0


def display_name(path: str | os.PathLike[str]) -> str:
    """A path as reports show it: each byte of the name that is not UTF-8 (held as a surrogate since
    the command line decoded it) is written `\\xNN`, so every output format can hold the name and
    two names that differ only there stay two names (a run records the texts it checked by name)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def read_source(path: str | os.PathLike[str], display: str | None = None) -> SourceFile | Diagnostic:
    """The file as text, or an `unreadable-input` diagnostic (missing, a folder, too big, not UTF-8).
    At most the bound's worth of bytes is read, whatever size the file claims (a device or a file of
    `/proc` claims none). A named pipe (`mkfifo`) is read once something writes to it, waited for
    `PIPE_WAIT` seconds at most (`_read_pipe`), never for ever."""
    name = display or display_name(path)
    bound = MAX_INPUT_CHARS * 4  # UTF-8 takes at most 4 bytes a character
    try:
        if _is_named_pipe(os.stat(path)):
            data = _read_pipe(path, bound + 1)
            if data is None:
                return diagnostic("unreadable-input", Span(name, 0, 0),
                                  f"`{name}` is a named pipe that nothing wrote to within {PIPE_WAIT:g} seconds")
        else:
            with open(path, "rb") as handle:
                data = handle.read(bound + 1)
        if len(data) > bound:
            size = os.path.getsize(path)
            shown = f"{size:,} bytes" if size > bound else f"more than {bound:,} bytes"
            return diagnostic("input-too-large", Span(name, 0, 0),
                              f"the file has {shown}, over the bound of {MAX_INPUT_CHARS:,} characters")
    except FileNotFoundError:
        return diagnostic("unreadable-input", Span(name, 0, 0), f"no such file `{name}`")
    except IsADirectoryError:
        return diagnostic("unreadable-input", Span(name, 0, 0), f"`{name}` is a folder, not a file")
    except OSError as error:
        return diagnostic("unreadable-input", Span(name, 0, 0), f"cannot read `{name}`: {error.strerror or error}")
    return decode_source(name, data)


PIPE_WAIT = 10.0  # seconds a named pipe given as an input is waited for, for something to write to it


def _is_named_pipe(status: os.stat_result) -> bool:
    """Whether a file is a named pipe (`mkfifo`), which may have no writer yet. An anonymous pipe
    (`<(make-plan)`'s `/dev/fd/63`, `/dev/stdin` fed by `|`) has one by construction and is read
    as a file is, however slow its writer: it lives on the kernel's pipe file system, whose device a
    pipe made here shares."""
    return stat.S_ISFIFO(status.st_mode) and status.st_dev != _anonymous_pipe_device()


@functools.cache
def _anonymous_pipe_device() -> int:
    reading, writing = os.pipe()
    try:
        return os.fstat(reading).st_dev
    finally:
        os.close(reading)
        os.close(writing)


def _read_pipe(path: str | os.PathLike[str], limit: int) -> bytes | None:
    """Up to `limit` bytes of a named pipe, read to its end once a writer has written (or closed it);
    None when nothing wrote within `PIPE_WAIT` seconds. Opened without waiting for a writer (POSIX
    `O_NONBLOCK`: a plain `open` would wait in the kernel for one, for ever), then read blocking."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        ready, _, _ = select.select([descriptor], [], [], PIPE_WAIT)
        if not ready:
            return None
        os.set_blocking(descriptor, True)
        with open(descriptor, "rb", closefd=False) as handle:
            return handle.read(limit)
    finally:
        os.close(descriptor)


def decode_source(name: str, data: bytes) -> SourceFile | Diagnostic:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        good = data[: error.start].decode("utf-8", errors="replace")
        source = SourceFile(name, good)
        line, column = source.position(len(good))
        return diagnostic("unreadable-input", Span(name, len(good), len(good)),
                          f"the file is not UTF-8 text: byte `0x{data[error.start]:02x}` at line {line}, column {column}",
                          help="save the file as UTF-8")
    if text.startswith("\ufeff"):
        text = text[1:]  # a byte-order mark is no character of the text: columns on line 1 count without it
    if "\0" in text:
        offset = text.index("\0")
        return diagnostic("unreadable-input", Span(name, offset, offset + 1),
                          "the file holds a NUL character: it looks like binary data, not a plan or policy")
    return SourceFile(name, text)


def check(plan_paths: Sequence[str | os.PathLike[str]], policy_paths: Sequence[str | os.PathLike[str]] = (),
          options: dict | None = None) -> CheckResult:
    """Check plan files against policy files (the `plangate check` command); one path alone may be
    given as itself."""
    plan_paths, policy_paths = once_each(as_paths(plan_paths, "plan")), once_each(as_paths(policy_paths, "policy"))
    # A file given among the plans and with `--policy` (`check *.plan *.policy --policy base.policy`)
    # is read once, as a policy: its mistakes are reported once.
    as_policy = {os.path.realpath(path) for path in policy_paths}
    started = time.perf_counter()
    diagnostics: list[Diagnostic] = []
    plan_sources = read_sources([path for path in plan_paths if os.path.realpath(path) not in as_policy], diagnostics)
    policy_sources = read_sources(policy_paths, diagnostics)
    options = {**(options or {}), "policy_names": [display_name(path) for path in policy_paths]}  # read or not
    result = check_sources(plan_sources, policy_sources, options)
    readable = {display_name(path): path for path in [*plan_paths, *policy_paths]}
    for item in diagnostics:  # show where undecodable bytes stand: the text before them is readable
        if item.name == "unreadable-input" and item.span.start > 0 and item.file not in result.sources \
                and os.path.isfile(readable.get(item.file, item.file)):  # a pipe, read once, is not read again
            try:
                with open(readable.get(item.file, item.file), "rb") as handle:
                    text = handle.read(MAX_INPUT_CHARS * 4).decode("utf-8", "replace")
            except OSError:
                continue  # gone since: the diagnostic still says where
            result.sources.add(SourceFile(item.file, text))
    result.diagnostics = sorted(diagnostics + result.diagnostics, key=Diagnostic.sort_key)
    result.files = [display_name(p) for p in once_each([*plan_paths, *policy_paths])]
    result.plan_files = [display_name(p) for p in plan_paths]  # those given, read or not
    result.timings["read"] = result.timings.get("read", 0.0)
    result.timings["total"] = time.perf_counter() - started
    return result


def once_each(paths: Sequence[str | os.PathLike[str]]) -> list[str | os.PathLike[str]]:
    """The paths in order, each file once (`check a.plan ./a.plan` checks `a.plan` once)."""
    seen: set[str] = set()
    kept = []
    for path in paths:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            kept.append(path)
    return kept


def policy_set(sources: Sequence[SourceFile]) -> list[SourceFile]:
    """Policy texts in one order whatever the caller's, each text once (by the SHA-256 of the text):
    the policy they compile to, and its hash, then name the set of policies (`plangate run`, the
    gate)."""
    by_text: dict[str, SourceFile] = {}
    for source in sources:
        by_text.setdefault(hashlib.sha256(source.text.encode("utf-8", "surrogatepass")).hexdigest(), source)
    return [by_text[digest] for digest in sorted(by_text)]


def read_sources(paths: Iterable[str | os.PathLike[str]], diagnostics: list[Diagnostic]) -> list[SourceFile]:
    """The files that could be read, in order; a diagnostic in `diagnostics` for each that could not."""
    sources = []
    for path in paths:
        source = read_source(path)
        if isinstance(source, SourceFile):
            sources.append(source)
        else:
            diagnostics.append(source)
    return sources


def as_paths(paths: object, what: str) -> list[str]:
    """Paths given to the API — one path, or any iterable of them (a generator is read once) — as a
    list of str; a clear `TypeError` for anything else."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    if not isinstance(paths, Iterable):
        raise TypeError(f"the {what} files are a path or a list of paths, not {type(paths).__name__}")
    found = []
    for path in paths:
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise TypeError(f"a {what} path is a str, bytes or os.PathLike, not {type(path).__name__}")
        found.append(os.fsdecode(path))
    return found


def as_sources(items: object, what: str) -> list[SourceFile]:
    """Texts given to the API as `SourceFile`s or (name, text) pairs, as `SourceFile`s; a clear
    `TypeError` for anything else (a lone text or file where a list goes, bytes where text goes)."""
    one_pair = isinstance(items, tuple) and len(items) == 2 and isinstance(items[1], str)
    if isinstance(items, (str, bytes, SourceFile)) or one_pair or not isinstance(items, Iterable):
        raise TypeError(f"the {what} texts are a list of SourceFile or (name, text) pairs, not a "
                        f"{type(items).__name__}")
    found = []
    for item in items:
        if isinstance(item, SourceFile):
            found.append(item)
            continue
        try:
            name, text = item
        except (TypeError, ValueError):
            raise TypeError(f"a {what} source is a (name, text) pair or a SourceFile, not {type(item).__name__}") from None
        if not isinstance(text, str):
            raise TypeError(f"the text of {what} `{name}` must be a str (decode bytes first), not {type(text).__name__}")
        found.append(SourceFile(str(name), text))
    return found


def check_sources(plan_sources: Sequence[SourceFile], policy_sources: Sequence[SourceFile] = (),
                  options: dict | None = None) -> CheckResult:
    """Check texts already in memory (the embeddable API; nothing touches the file system).

    Options: `solver_time_bound` (seconds per solver query of the budget proofs, default 5);
    `solver_total_bound` (seconds of solving for the whole call, all its plans, default 30);
    `plan_checks` (default True; False parses the plans and compiles the policies only — what the
    runtime does with a plan it recorded after checking it); `policy_names` and
    `announce_no_policy` (the `no-policy` note, as the command line words it).

    The expressions evaluated share one work allowance (`cel.evaluate.COMMAND_WORK`): past it, each
    fails as one over its own bound does (never a silent pass), and one `input-too-large` error
    (`work_exhausted`) says the verdicts may be wrong.

    The cyclic garbage collector is paused for the duration: the stages allocate many long-lived
    objects and no cycles worth collecting, and generational passes over a large plan's IR would
    otherwise cost more than the checks. The caller's collector state is restored afterwards.
    """
    from plangate.cel.evaluate import COMMAND_WORK, allowance

    plan_sources, policy_sources = as_sources(plan_sources, "plan"), as_sources(policy_sources, "policy")
    collecting = gc.isenabled()
    gc.disable()
    try:
        with allowance(COMMAND_WORK) as work:  # many expensive expressions cannot add up to hours
            result = _check_sources(plan_sources, policy_sources, dict(options or {}))
        if work.exhausted and work.outermost:  # (inside `plangate test`, the command says it once)
            result.diagnostics = sorted([*result.diagnostics, work_exhausted([*plan_sources, *policy_sources])],
                                        key=Diagnostic.sort_key)
        return result
    finally:
        if collecting:
            gc.enable()


def work_exhausted(sources: Sequence[SourceFile]) -> Diagnostic:
    """Said once when the command's expressions spent their work allowance: the evaluations after
    that failed at the evaluator's bound (a deny counts as firing, a `when` as failing), so some
    verdicts may be wrong, and the command says it could not finish its job."""
    from plangate.cel.evaluate import COMMAND_WORK, MAX_WORK

    return diagnostic("input-too-large", Span(sources[0].name if sources else "<input>", 0, 0),
                      f"the expressions do more work in all than one command may ({COMMAND_WORK // MAX_WORK} times "
                      "what one expression may do): those evaluated after that failed at the evaluator's bound, "
                      "so some verdicts here may be wrong",
                      help="simplify the comprehensions (`exists`, `all`, `map` nested in one another) or check "
                           "fewer plans or policies at once")


def _check_sources(plan_sources: Sequence[SourceFile], policy_sources: Sequence[SourceFile],
                   options: dict) -> CheckResult:
    timings: dict[str, float] = {"parse": 0.0, "policy": 0.0, "graph": 0.0, "checks": 0.0}
    sources = SourceMap()
    diagnostics: list[Diagnostic] = []
    plans: list[Plan] = []
    policies: list[Policy] = []
    policy_documents: list[Policy] = []

    clock = time.perf_counter()
    for source in plan_sources:
        sources.add(source)
        document = _parse(source, diagnostics)
        if document is not None:
            plans.extend(document.plans)
            policies.extend(document.policies)
            if not document.plans and not document.policies:
                diagnostics.append(diagnostic("wrong-document-kind", Span(source.name, 0, 0),
                                              f"`{source.name}` holds no plan",
                                              help="a plan file starts with `plan name {`"))
    unused: list[str] = []  # the policies given that could not be read: their checks did not run
    compiled_set = policy_set(policy_sources)  # a set: their order and repeats change nothing, the hash included
    for source in compiled_set:
        sources.add(source)
        document = _parse(source, diagnostics)
        if document is None or not document.policies:
            unused.append(source.name)
        if document is None:
            continue
        policy_documents.extend(document.policies)
        for plan in document.plans:
            diagnostics.append(diagnostic("wrong-document-kind", plan.id_span,
                                          f"`{source.name}` was given as a policy but holds plan `{plan.id}`",
                                          help="pass plans as arguments and policies with `--policy`"))
        if not document.policies and not document.plans:
            diagnostics.append(diagnostic("wrong-document-kind", Span(source.name, 0, 0),
                                          f"`{source.name}` holds no policy",
                                          help="a policy file starts with `policy name {`"))
    timings["parse"] = time.perf_counter() - clock

    clock = time.perf_counter()
    for policy in [*policy_documents, *policies]:
        _run_checks(POLICY_CHECKS, PolicyContext(policy), diagnostics, has_policy=True)
    compiled: CompiledPolicy | None = None
    if policy_documents:
        compiled, compile_diagnostics = compile_policies(policy_documents)
        diagnostics.extend(compile_diagnostics)
    for policy in policies:  # a policy among the plans is linted and compiled on its own
        diagnostics.extend(compile_policies([policy])[1])
    timings["policy"] = time.perf_counter() - clock

    _report_duplicate_plans(plans, diagnostics)
    plan_checks = options.get("plan_checks", True)
    with solve.allowance(float(options.get("solver_total_bound", SOLVER_TOTAL_BOUND))):  # all the plans together
        for plan in plans if plan_checks else ():
            ordering = sum(len(step.after) for step in plan.steps)
            if ordering > MAX_AFTER_EDGES:  # the graph would hold millions of edges: not checked
                diagnostics.append(diagnostic(
                    "input-too-large", plan.id_span,
                    f"plan `{plan.id}` names {ordering:,} steps in its `after` lists, over the bound of {MAX_AFTER_EDGES:,}",
                    help="order the steps through fewer `after` names: a step after the last of a chain is after all of it"))
                continue
            clock = time.perf_counter()
            graph = build_graph(plan)
            timings["graph"] += time.perf_counter() - clock
            clock = time.perf_counter()
            context = PlanContext(plan=plan, graph=graph, policy=compiled, options=options)
            _run_checks(PLAN_CHECKS, context, diagnostics, has_policy=compiled is not None,
                        is_dag=graph.is_dag() and not graph.self_edges, timings=timings)
            timings["checks"] += time.perf_counter() - clock
    given = options.get("policy_names") or [source.name for source in policy_sources]
    read = {source.name for source in policy_sources}
    unused += [name for name in given if name not in read and name not in unused]  # unreadable files
    if plans and compiled is None and given:
        names = backticked(given)
        diagnostics.append(diagnostic(
            "no-policy", plans[0].id_span,
            f"the policy {names} could not be read: tools, risks, approvals, rules and limits were not checked",
            help="fix the errors reported in the policy, then check again"))
    elif plans and unused:
        names = backticked(unused)
        others = ", ".join(f"`{name}`" for name in given if name not in unused)
        diagnostics.append(diagnostic(
            "no-policy", plans[0].id_span,
            f"the policy {names} could not be read: its tools, risks, approvals, rules and limits were not checked; "
            f"the plans were checked against {others} alone",
            help="fix the errors reported in the policy, then check again"))
    elif plans and compiled is None and options.get("announce_no_policy"):
        diagnostics.append(diagnostic(
            "no-policy", plans[0].id_span, "no policy was given: tools, risks, approvals, rules and limits were not checked",
            help="pass `--policy FILE` to check tools, risks, approvals, rules and limits"))

    return CheckResult(
        diagnostics=sorted(diagnostics, key=Diagnostic.sort_key),
        sources=sources,
        files=[source.name for source in [*plan_sources, *policy_sources]],
        plan_files=[source.name for source in plan_sources],
        policy_set=compiled_set,
        plans=plans,
        policies=policy_documents,
        policy=compiled,
        timings=timings,
    )


def compile_policy(paths: Sequence[str | os.PathLike[str]]) -> tuple[CompiledPolicy | None, CheckResult]:
    """Compile policy files for the runtime: the compiled policy, None when any file has an error
    (as `plangate run` and the gate refuse such policies); the result carries the diagnostics."""
    result = check([], paths)
    return (result.policy if not result.errors else None), result


def _parse(source: SourceFile, diagnostics: list[Diagnostic]) -> Document | None:
    try:
        result = parse_source(source)
    except Exception as error:  # the parser's own guarantee is never to raise; this is the backstop
        diagnostics.append(_internal(Span(source.name, 0, 0), "parse", error))
        return None
    diagnostics.extend(result.diagnostics)
    return result.document


def _run_checks(checks: Sequence[Check], context: object, diagnostics: list[Diagnostic], *,
                has_policy: bool, is_dag: bool = True, timings: dict[str, float] | None = None) -> None:
    span = getattr(getattr(context, "plan", None) or getattr(context, "policy"), "id_span")
    for item in checks:
        if (item.needs_policy and not has_policy) or (item.needs_dag and not is_dag):
            continue
        clock = time.perf_counter()
        try:
            diagnostics.extend(item.module.check(context))
        except Exception as error:
            diagnostics.append(_internal(span, item.name, error))
        if timings is not None:
            key = f"check:{item.name}"
            timings[key] = timings.get(key, 0.0) + time.perf_counter() - clock


def _internal(span: Span, stage: str, error: Exception) -> Diagnostic:
    return diagnostic("internal-error", span, f"the `{stage}` stage failed: {type(error).__name__}: {error}",
                      help="this is a bug in plangate; the other checks still ran")


def _report_duplicate_plans(plans: list[Plan], diagnostics: list[Diagnostic]) -> None:
    """Two plans with one id and one version are easy to confuse (runs, journals and approvals name
    plans by id and version); versions of one plan, checked together before a rollout, are not."""
    seen: dict[tuple[str, int | None], Plan] = {}
    for plan in plans:
        key = (plan.id, plan.version)
        if key in seen:
            version = f" version {plan.version}" if plan.version is not None else ""
            diagnostics.append(diagnostic(
                "duplicate-plan", plan.id_span, f"a plan named `{plan.id}`{version} is already being checked",
                labels=[Label(seen[key].id_span, "first plan here")],
                help="give one of them another name, or another `version` if it is a new version of the plan"))
        else:
            seen[key] = plan
