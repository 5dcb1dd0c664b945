"""Which steps can run together, and the exact worst case over the plan's conditions.

Model. A step with `when` is *guarded* by its condition. A step that references the result of a
skipped step is skipped too (an `after` alone only orders: a skipped step counts as done), so a
step runs exactly when every guard of its *guard set* fires: its own `when` and, transitively,
those of every step whose result it references. Every budget figure grows with the set of running
steps (cost, calls and work are sums of non-negative weights, a longest path only lengthens), so a
worst case needs only *maximal* sets of guards that can fire together.

Classification (no solver). A condition that reads no name is evaluated: `true` is no guard, and
anything else (false, an error, no bool) means the step never runs, as at run time. The others are
taken in groups that name the same steps. A group of
simple conditions (`simple.py`: fields compared with constants) is read as atoms. Otherwise each
`when` is encoded (`encode.Encoder`) over an activation in which every step's result is an
`Unknown` (opaque conditions — `matches`, `== null`, `== c` of another type than the value's other
uses, `in` over a run-time list, and tests outside the subset such as `exists` or `int(x) > 2`
(keyed by their text, and reported as decided at run time) — are Boolean atoms
shared by the group, so a condition and its negation never fire together; a witness takes them to
hold as its pattern says, and says so): it folds to always or never; or it is outside the subset ("run time": taken to
possibly fire — sound for upper bounds, and said in every witness that uses it; conditions that
are fine alone but give one value two sorts together are all "run time"); or it is symbolic.
Symbolic guards are *correlated* when they read a common run-time value: a field path (a result's
root only when the root itself is used as a value — it is always present otherwise). Union-find
over those paths gives *components*; two components share no value, so what one fires never
constrains the other.

Patterns (lazily). For each component, every maximal set of its guards that can fire together,
with a witness of each: found in Python when its conditions are simple comparisons of fields with
constants (`simple.py`), else by the solver worker (`worker.py`). Components of one shape give one text
(the encoder names constants by first use) and are solved once; all go in one batch with one time
bound. A component the batch does not settle stays *unsettled*: upper bounds let all its guards
fire, lower bounds (witnesses) let none, and a decision between the two is "unknown".

Exact worst cases.
- Additive figures (cost, calls, work) decompose: steps with no correlated guard add their weight
  as in the DP of `plangate.budget` (exact for independent conditions); the rest are split into
  *weight groups* — components joined when one step's guard set spans them — and each group adds
  its best combination of patterns (enumerated, at most `MAX_COMBINATIONS`).
- The critical path does not decompose. The longest path with every possibly-running step is an
  upper bound; if it exceeds the threshold, the best combination along that path alone decides
  most plans; otherwise the combinations of the components that guard some step on a path longer
  than the threshold are enumerated over those steps only.
Every witness is an execution: one pattern per component (unsettled ones fire nothing), the steps
that run under it, and the values of the pattern models.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Sequence

from plangate import budget
from plangate.budget import Loads
from plangate.cel.ast import Expr, Ident, field_chain, walk
from plangate.cel.evaluate import constant_when
from plangate.graph import PlanGraph
from plangate.smt import simple, solve
from plangate.smt.encode import Encoder, Unknown, Unsupported

MAX_COMBINATIONS = 4096
MAX_ENUMERATION = 4_000_000  # steps looked at over all combinations of one enumeration


class StepResults(Mapping[str, object]):
    """The activation of a plan's conditions: every step's result, known only at run time."""

    def __init__(self, steps: Mapping[str, object]) -> None:
        self.steps = steps
        self.results: dict[str, object] = {}

    def __getitem__(self, name: str) -> object:
        if name not in self.steps:
            raise KeyError(name)
        if name not in self.results:
            self.results[name] = {"result": Unknown(f"{name}.result")}
        return self.results[name]

    def __contains__(self, name: object) -> bool:
        return name in self.steps

    def __iter__(self) -> Iterator[str]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)


@dataclass
class Guard:
    step: str
    condition: Expr
    kind: str  # "symbolic" | "runtime"
    # What is outside the subset: for "runtime", the whole condition; for "symbolic", a test in it
    # taken as an opaque condition (`Encoder.test_atom`)
    reason: str | None = None
    paths: tuple[str, ...] = ()  # the run-time values it reads (for links and explanations)
    component: int = -1
    opaque: bool = False  # it holds an opaque condition (`matches`…): a witness takes it to hold as chosen


@dataclass
class Component:
    guards: list[str]
    atoms: list[list[simple.Atom]] | None = None  # per guard, when every condition is simple
    encoder: Encoder | None = None  # with `group`: the text for the solver, once needed
    group: solve.PatternGroup | None = None
    patterns: tuple[frozenset[str], ...] | None = None  # maximal firing sets; None while unsettled
    witnesses: tuple[dict[str, object], ...] = ()  # path → value, one per pattern
    reason: str | None = None  # why it is unsettled


@dataclass(frozen=True)
class Worst:
    """A figure's worst case: no execution exceeds `upper`; the witness execution reaches `lower`.

    `runs`, `choice` and `lower` are given only when `upper` exceeds the threshold asked about.
    """

    upper: int
    lower: int = 0
    runs: tuple[bool, ...] | None = None
    choice: Mapping[int, int | None] = field(default_factory=dict)  # component → pattern index (None: fires none)
    path: tuple[int, ...] = ()  # the witness's longest path (critical path only)
    reason: str | None = None  # why `lower` may fall short of `upper`


@dataclass
class WeightGroup:
    components: list[int]
    steps: list[int]  # the steps that need some of their guards
    combinations: list[dict[int, int]] | str  # one pattern per component; or why not enumerated
    running: list[list[int]]  # per combination: which of `steps` run


class Branches:
    def __init__(self, graph: PlanGraph, loads: Loads, time_bound: float) -> None:
        self.loads = loads
        self.graph = graph
        self.steps = graph.steps
        self.time_bound = time_bound
        self.position = {step: index for index, step in enumerate(loads.steps)}
        self.guards: dict[str, Guard] = {}
        self.never: dict[str, str] = {}  # step → the guard that rules it out
        self.components: list[Component] = []
        self.activation = activation = StepResults(graph.steps)
        conditions = {step_id: graph.steps[step_id].when for step_id in loads.steps
                      if graph.steps[step_id].when is not None}
        for step_id, condition in list(conditions.items()):
            runs = constant_when(condition)
            if runs is not None:  # a constant: the step always runs, or never does
                del conditions[step_id]
                if not runs:
                    self.never[step_id] = step_id
        for guards in _by_referenced_steps(conditions, graph):
            self._classify(guards, conditions, activation)
        self.guard_sets = self._guard_sets(graph)
        self.requirements = self._requirements()
        self.static_runs = [step not in self.never for step in loads.steps]
        self._solved = False
        self._possible_runs: list[bool] | None = None
        self._weight_groups: list[WeightGroup] | None = None
        self._silent: dict[int, bool] | None = None  # component → it can fire none of its guards
        self._deadline = 0.0  # set by `solve`
        self.solver_seconds = 0.0  # wall time spent waiting for the solver (for benchmarks)
        self.solved_by_worker: set[str] = set()  # the shapes the solver settled (the others: simple.py)

    # -- classification ---------------------------------------------------------------------

    def _classify(self, steps: list[str], conditions: Mapping[str, Expr], activation: Mapping[str, object]) -> None:
        """Classify the conditions of `steps` (which read the same steps' results): simple ones by
        their atoms, the others by encoding them together; then split the symbolic ones into
        components by the values they share. A simple component is encoded only if it needs the
        solver after all."""
        found = [simple.atoms(conditions[step_id], self.steps) for step_id in steps]
        if all(atoms is not None for atoms in found) and simple.well_formed(found):  # type: ignore[arg-type]
            for step_id, atoms in zip(steps, found):
                self.guards[step_id] = Guard(step_id, conditions[step_id], "symbolic",
                                             paths=simple.links(atoms))  # type: ignore[arg-type]
            for part in _components([self.guards[step_id] for step_id in steps]):
                self._add_component(part, atoms=[found[steps.index(guard.step)] for guard in part])
            return
        encoder = Encoder(activation, opaque=True, opaque_tests=True)
        fires: dict[str, str] = {}
        reads: dict[str, set[str]] = {}
        opaque: dict[str, set[str]] = {}
        try:
            for step_id in steps:
                encoder.touched, encoder.atoms_touched = set(), set()
                fires[step_id] = encoder.fires(conditions[step_id])
                reads[step_id] = encoder.touched
                opaque[step_id] = encoder.atoms_touched
            encoder.values()  # every value's sort must be settled
        except (Unsupported, RecursionError) as error:
            reasons = {step_id: self._reason_alone(conditions[step_id], activation) for step_id in steps}
            if not any(reasons.values()):  # each alone is fine: together they disagree (a value's sort)
                reasons = dict.fromkeys(steps, _reason(error))
            for step_id, reason in reasons.items():
                if reason is not None:
                    self.guards[step_id] = Guard(step_id, conditions[step_id], "runtime", reason)
            rest = [step_id for step_id in steps if reasons[step_id] is None]
            if rest:
                self._classify(rest, conditions, activation)
            return
        linking = {variable.path for variable in encoder.variables.values()
                   if variable.parent is not None or variable.used}
        symbolic = []
        for step_id in steps:
            if fires[step_id] == "false":
                self.never[step_id] = step_id
            elif fires[step_id] != "true":
                paths = tuple(sorted(reads[step_id] & linking))
                outside = next((atom.reason for key, atom in encoder.atoms.items()
                                if key[0] == "test" and atom.name in opaque[step_id]), None)
                self.guards[step_id] = Guard(step_id, conditions[step_id], "symbolic", outside, paths=paths,
                                             opaque=bool(opaque[step_id]))
                symbolic.append(self.guards[step_id])
        parts = _components(symbolic)
        if len(parts) == 1:
            self._add_component(parts[0], encoder=encoder, fires=[fires[guard.step] for guard in parts[0]])
            return
        for part in parts:
            self._add_component(part)

    @staticmethod
    def _reason_alone(condition: Expr, activation: Mapping[str, object]) -> str | None:
        """Why `condition` on its own is outside the subset, if it is."""
        encoder = Encoder(activation, opaque=True, opaque_tests=True)
        try:
            encoder.fires(condition)
            encoder.values()
        except (Unsupported, RecursionError) as error:
            return _reason(error)
        return None

    def _add_component(self, guards: list[Guard], *, atoms: list[list[simple.Atom]] | None = None,
                       encoder: Encoder | None = None, fires: list[str] | None = None) -> None:
        for guard in guards:
            guard.component = len(self.components)
        component = Component([guard.step for guard in guards], atoms)
        if encoder is not None and fires is not None:
            component.encoder, component.group = encoder, _pattern_group(encoder, fires)
        self.components.append(component)

    def pattern_group(self, component: Component) -> solve.PatternGroup:
        """The component's text for the solver (encoded on first need)."""
        if component.group is None:
            encoder = Encoder(self.activation, opaque=True, opaque_tests=True)
            fires = [encoder.fires(self.guards[step].condition) for step in component.guards]
            component.encoder, component.group = encoder, _pattern_group(encoder, fires)
        return component.group

    def _guard_sets(self, graph: PlanGraph) -> list[frozenset[str]]:
        """Per step (topological position): the guards that must fire for it to run."""
        empty: frozenset[str] = frozenset()
        sets: list[frozenset[str]] = []
        for step_id in self.loads.steps:
            references = [p for p in graph.pred[step_id] if graph.edges[(p, step_id)].kind == "reference"]
            inherited = [sets[self.position[p]] for p in references if sets[self.position[p]]]
            blocked = next((p for p in references if p in self.never), None) if self.never else None
            if blocked is not None and step_id not in self.never:
                self.never[step_id] = self.never[blocked]
            if step_id in self.guards:
                sets.append(frozenset((step_id,)).union(*inherited))
            elif len(inherited) == 1:
                sets.append(inherited[0])  # one set inherited as it is (equal sets then share one object)
            else:
                sets.append(empty.union(*inherited))
        return sets

    def _requirements(self) -> dict[int, tuple[tuple[int, frozenset[str]], ...]]:
        """Per step with correlated guards: for each component, the guards it needs to fire."""
        needs: dict[int, tuple[tuple[int, frozenset[str]], ...]] = {}
        by_set: dict[frozenset[str], tuple[tuple[int, frozenset[str]], ...]] = {}  # equal sets need the same
        for index, guard_set in enumerate(self.guard_sets):
            if not guard_set:
                continue
            found = by_set.get(guard_set)
            if found is None:
                by_component: dict[int, set[str]] = {}
                for guard_id in guard_set:
                    guard = self.guards[guard_id]
                    if guard.kind == "symbolic":
                        by_component.setdefault(guard.component, set()).add(guard_id)
                found = by_set[guard_set] = tuple((component, frozenset(ids))
                                                  for component, ids in sorted(by_component.items()))
            if found:
                needs[index] = found
        return needs

    # -- facts for explanations -------------------------------------------------------------

    def guards_decided_at_run_time(self) -> list[Guard]:
        """The guards with something outside the subset: "runtime" ones, and symbolic ones with
        an opaque test (`reason` says what)."""
        return [guard for guard in self.guards.values() if guard.reason is not None]

    def assumed(self, runs: Sequence[bool]) -> list[str]:
        """The running steps whose guard sets hold a condition decided at run time."""
        return [self.loads.steps[index] for index, guard_set in enumerate(self.guard_sets) if runs[index]
                and any(self.guards[guard_id].kind == "runtime" or self.guards[guard_id].opaque
                        for guard_id in guard_set)]

    def witness_values(self, choice: Mapping[int, int | None]) -> dict[str, object]:
        values: dict[str, object] = {}
        for component, pattern in sorted(choice.items()):
            if pattern is not None:  # a component that fires nothing: its values are not shown
                values.update(self.components[component].witnesses[pattern])
        return values

    # -- solving ----------------------------------------------------------------------------

    def solve(self) -> None:
        """Find the patterns of every component (once; one batch; shapes solved once)."""
        if self._solved:
            return
        self._solved = True
        self._possible_runs = None
        shapes: dict[str, int] = {}
        unique: list[solve.PatternGroup] = []
        deadline = time.monotonic() + self.time_bound  # one bound for the simple pass and the solver
        self._deadline = deadline  # and for the questions asked later (`silent_components`)
        hard = [component for component in self.components if not self._settle_simply(component, deadline)]
        for component in hard:
            group = self.pattern_group(component)
            if group.smt not in shapes:
                shapes[group.smt] = len(unique)
                unique.append(group)
        self.solved_by_worker = set(shapes)
        started = time.perf_counter()
        left = deadline - time.monotonic()
        if left > 0:
            answers = solve.maximal_patterns(unique, left)
        else:
            reason = f"the solver timed out: its time bound of {self.time_bound:g}s was spent before it could start"
            answers = [solve.Patterns("unknown", reason=reason) for _ in unique]
        self.solver_seconds += time.perf_counter() - started
        for component in hard:
            assert component.group is not None and component.encoder is not None
            answer = answers[shapes[component.group.smt]]
            if answer.status != "ok":
                component.reason = answer.reason
                continue
            component.patterns = tuple(frozenset(component.guards[i] for i in found.fires) for found in answer.patterns)
            component.witnesses = tuple(component.encoder.decode(found.model) for found in answer.patterns)

    def _settle_simply(self, component: Component, deadline: float) -> bool:
        """Find the patterns without the solver when every condition is simple (`simple.py`), by
        `deadline` (a `time.monotonic()` instant)."""
        found = component.atoms or [simple.atoms(self.guards[step].condition, self.steps) for step in component.guards]
        if any(atoms is None for atoms in found) or not simple.well_formed(found):  # type: ignore[arg-type]
            return False
        settled = simple.patterns(found, deadline)  # type: ignore[arg-type]
        if settled is None:
            return False
        component.patterns = tuple(frozenset(component.guards[i] for i in pattern) for pattern, _ in settled)
        component.witnesses = tuple(witness for _, witness in settled)
        return True

    def runs_under(self, choice: Mapping[int, int | None]) -> list[bool]:
        """The execution in which each settled component fires the pattern `choice` gives it
        (every settled component has one) and unsettled ones fire nothing."""
        runs = list(self.static_runs)
        for index, needs in self.requirements.items():
            if runs[index]:
                runs[index] = all(self._fires(component, guards, choice) for component, guards in needs)
        return runs

    def _fires(self, component: int, guards: frozenset[str], choice: Mapping[int, int | None]) -> bool:
        patterns = self.components[component].patterns
        pattern = choice.get(component)
        return patterns is not None and pattern is not None and guards <= patterns[pattern]

    def silent_components(self, choice: Mapping[int, int | None]) -> list[int]:
        """The settled components of `choice` that fire a pattern and can instead fire none of their
        guards (a choice of `None`: the schedule search tries runs with those steps skipped, since a
        branch with less work can take longer).

        Every guard failing is taken to come from the fields its conditions read being absent from
        the results, which has no other effect only where nothing else in the plan reads those
        fields (an argument, a key, another `when`, the producing step's own `expect`, which would
        fail first): a component whose fields are read elsewhere is not silent. Of the others, a
        simple one is when each atom tests a field under a result (a result itself is there, `null`
        at worst) and none holds of an absent one; one the solver settled, when it says no guard
        need fire — asked in one batch, of at most `MAX_SILENT` components, within what is left of
        the bound `solve` set."""
        if self._silent is None:
            self._silent = {}
            elsewhere = _fields_read_outside_guards(self.graph, self.guards)
            above = {".".join(path.split(".")[:end]) for path in elsewhere for end in range(2, path.count(".") + 1)}
            asked: list[int] = []
            for index, component in enumerate(self.components):
                if component.patterns is None:
                    continue
                if any(_overlaps(path, elsewhere, above) for guard in component.guards for path in self.guards[guard].paths):
                    continue
                if component.atoms is not None:  # a field under a result may be absent; the result itself is
                    self._silent[index] = all(atom.op != "absent" and atom.path.count(".") >= 2  # (`null` at worst)
                                              for atoms in component.atoms for atom in atoms)
                elif component.group is not None and len(asked) < MAX_SILENT:
                    asked.append(index)
            left = self._deadline - time.monotonic()
            if asked and left > 0:
                queries = []
                for index in asked:
                    group = self.components[index].group
                    assert group is not None
                    none = " ".join(group.fires)
                    queries.append(solve.Query(f"{group.smt}\n(assert (not (or false {none})))"))
                started = time.perf_counter()
                answers = solve.check(queries, left)
                self.solver_seconds += time.perf_counter() - started
                for index, answer in zip(asked, answers):
                    self._silent[index] = answer.status == "sat"
        return [component for component, pattern in sorted(choice.items())
                if pattern is not None and self._silent.get(component, False)]

    def possible_runs(self) -> list[bool]:
        """Every step that runs in some execution, as far as is known (an over-approximation)."""
        if self._possible_runs is None:
            runs = list(self.static_runs)
            for index, needs in self.requirements.items():
                if runs[index]:
                    runs[index] = all(self._possible(component, guards) for component, guards in needs)
            self._possible_runs = runs
        return self._possible_runs

    def _possible(self, component: int, guards: frozenset[str]) -> bool:
        patterns = self.components[component].patterns
        return patterns is None or any(guards <= pattern for pattern in patterns)

    def default_choice(self) -> dict[int, int]:
        """The first pattern of every settled component (a solved component has at least one)."""
        return {index: 0 for index, component in enumerate(self.components) if component.patterns is not None}

    # -- additive figures -------------------------------------------------------------------

    def maximum(self, weights: Sequence[int], threshold: int | None) -> Worst:
        """The worst case of Σ weight over running steps; exact unless a component is unsettled."""
        upper = sum(weight for weight, running in zip(weights, self.possible_runs()) if running)
        if threshold is not None and upper <= threshold:
            return Worst(upper)
        self.solve()
        runs = self.possible_runs()
        upper = lower = sum(weight for index, (weight, running) in enumerate(zip(weights, runs))
                            if running and index not in self.requirements)
        choice = self.default_choice()
        reasons: list[str] = []
        for group in self.weight_groups():
            if isinstance(group.combinations, str):
                reasons.append(group.combinations)
                upper += sum(weights[index] for index in group.steps if runs[index])
                lower += self._value(group.steps, weights, choice)
                continue
            values = [sum(weights[index] for index in running) for running in group.running]
            best = max(range(len(values)), key=values.__getitem__)
            choice.update(group.combinations[best])
            upper += values[best]
            lower += values[best]
        witness = tuple(self.runs_under(choice))
        return Worst(upper, lower, witness, choice, reason="; ".join(dict.fromkeys(reasons)) or None)

    def _value(self, steps: Sequence[int], weights: Sequence[int], choice: Mapping[int, int]) -> int:
        return sum(weights[index] for index in steps if self.static_runs[index]
                   and all(self._fires(c, guards, choice) for c, guards in self.requirements[index]))

    def weight_groups(self) -> list[WeightGroup]:
        """Components joined by the steps whose guards span them, with what runs under each
        combination of their patterns (once, after solving)."""
        if self._weight_groups is None:
            self._weight_groups = []
            for components, steps in self._joined_components():
                combinations = self._combinations(components, len(steps))
                running = [] if isinstance(combinations, str) else [
                    [index for index in steps if self.static_runs[index] and all(
                        self._fires(c, guards, choice) for c, guards in self.requirements[index])]
                    for choice in combinations]
                self._weight_groups.append(WeightGroup(components, steps, combinations, running))
        return self._weight_groups

    def _joined_components(self) -> list[tuple[list[int], list[int]]]:
        parent = list(range(len(self.components)))

        def find(item: int) -> int:
            while parent[item] != item:
                parent[item] = parent[parent[item]]
                item = parent[item]
            return item

        for needs in self.requirements.values():
            for (first, _), (other, _) in zip(needs, needs[1:]):
                parent[find(other)] = find(first)
        groups: dict[int, tuple[list[int], list[int]]] = {}
        for component in range(len(self.components)):
            groups.setdefault(find(component), ([], []))[0].append(component)
        for index, needs in self.requirements.items():
            groups[find(needs[0][0])][1].append(index)
        return list(groups.values())

    def _best_combination(self, components: list[int], steps: list[int],
                          weights: Sequence[int]) -> tuple[int, dict[int, int]] | str:
        """The best pattern per component for Σ weight over `steps`, or why it is not known."""
        combinations = self._combinations(components, len(steps))
        if isinstance(combinations, str):
            return combinations
        live = [index for index in steps if self.static_runs[index] and weights[index]]
        best_value, best_choice = -1, {}
        for choice in combinations:
            value = self._value(live, weights, choice)
            if value > best_value:
                best_value, best_choice = value, choice
        return best_value, best_choice

    def _combinations(self, components: list[int], steps: int) -> list[dict[int, int]] | str:
        """Every choice of one pattern per component, or why they are not enumerated: more than
        `MAX_COMBINATIONS`, or more than `MAX_ENUMERATION` steps to look at over all of them (each
        combination looks at `steps` steps: the enumeration is Python, outside the solver's bound)."""
        unsettled = [self.components[c].reason for c in components if self.components[c].patterns is None]
        if unsettled:
            return str(unsettled[0])
        sizes = [len(self.components[c].patterns or ()) for c in components]
        count = 1
        for size in sizes:
            count *= size
        if count > MAX_COMBINATIONS:
            return f"{_count_text(count)} combinations of branches are more than the {MAX_COMBINATIONS:,} the checker tries"
        if count * steps > MAX_ENUMERATION:
            return (f"{_count_text(count)} combinations of branches over {steps:,} steps are more than the checker "
                    f"tries ({MAX_ENUMERATION:,} steps looked at in all)")
        return [dict(zip(components, combination))
                for combination in itertools.product(*(range(size) for size in sizes))]

    # -- the critical path ------------------------------------------------------------------

    def critical(self, threshold: int) -> Worst:
        """The longest path's worst case, decided against `threshold` (see the module's notes)."""
        upper, _ = budget.critical_path(self.loads, self.possible_runs())
        if upper <= threshold:
            return Worst(upper)
        self.solve()
        runs = self.possible_runs()
        upper, path = budget.critical_path(self.loads, runs)
        if upper <= threshold:
            return Worst(upper)
        along = self._best_along(path, upper)
        if not isinstance(along, str) and along.lower > threshold:
            return along
        return self._enumerate_critical(runs, threshold, upper)

    def _best_along(self, path: tuple[int, ...], upper: int) -> Worst | str:
        """The execution that makes `path` longest (its critical path may be longer still)."""
        on_path = [index for index in path if index in self.requirements]
        components = sorted({c for index in on_path for c, _ in self.requirements[index]})
        best = self._best_combination(components, on_path, budget.step_times(self.loads, self.static_runs))
        if isinstance(best, str):
            return best
        choice = self.default_choice()
        choice.update(best[1])
        return self._witness(choice, upper)

    def _witness(self, choice: dict[int, int], upper: int) -> Worst:
        runs = self.runs_under(choice)
        length, path = budget.critical_path(self.loads, runs)
        return Worst(upper, length, tuple(runs), choice, path)

    def _enumerate_critical(self, runs: list[bool], threshold: int, upper: int) -> Worst:
        """Every combination of the branches that guard a step on a path longer than `threshold`."""
        through = budget.longest_through(self.loads, runs)
        relevant = [index for index in range(len(self.loads)) if through[index] > threshold]  # skipped ones still order
        components = sorted({c for index in relevant for c, _ in self.requirements.get(index, ())
                             if len(self.components[c].patterns or (0, 0)) > 1})
        combinations = self._combinations(components, len(self.requirements) + len(relevant))
        if isinstance(combinations, str):
            return Worst(upper, reason=combinations)
        keep = {index: position for position, index in enumerate(relevant)}
        loads = self.loads
        sub = Loads(tuple(loads.steps[i] for i in relevant), tuple(loads.attempts[i] for i in relevant),
                    tuple(loads.cost[i] for i in relevant), tuple(loads.seconds[i] for i in relevant),
                    tuple(tuple(keep[p] for p in loads.predecessors[i] if p in keep) for i in relevant))
        for combination in combinations:
            choice = self.default_choice()
            choice.update(combination)
            full = self.runs_under(choice)
            length, _ = budget.critical_path(sub, [full[i] for i in relevant])
            if length > threshold:
                return self._witness(choice, upper)
        return Worst(threshold)  # relevant paths were all checked; the others are short by definition


def _union_find() -> tuple[dict[str, str], Callable[[str], str]]:
    parent: dict[str, str] = {}

    def find(item: str) -> str:
        while parent.setdefault(item, item) != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    return parent, find


MAX_SILENT = 64  # solver-settled components asked whether none of their guards need fire


def _fields_read_outside_guards(graph: PlanGraph, guards: Mapping[str, "Guard"]) -> set[str]:
    """The result fields (`x.result.f…`) the plan's expressions read, but the `when`s of guarded
    steps: arguments, rollback arguments, keys, `expect`s (a step's own `result.f` as `x.result.f`)
    and unguarded `when`s."""
    from plangate.graph import step_expressions

    found: set[str] = set()
    for step_id, step in graph.steps.items():
        for clause, expr in step_expressions(step):
            if clause == "when" and step_id in guards:
                continue
            for node in walk(expr):
                chain = field_chain(node)
                if chain is None or not chain[1]:
                    continue
                root, fields = chain
                if root == "result" and clause in ("expect", "idempotency", "rollback"):
                    found.add(".".join([step_id, "result", *fields]))
                elif root in graph.steps and fields[0] == "result" and len(fields) > 1:
                    found.add(".".join([root, *fields]))
    return found


def _overlaps(path: str, read: set[str], above: set[str]) -> bool:
    """Whether `path`, a field under it (`path` is in `above`, the paths above those read), or a
    field above it (but a whole result) is in `read`."""
    if path in read or path in above:
        return True
    parts = path.split(".")
    return any(".".join(parts[:end]) in read for end in range(3, len(parts)))


def _by_referenced_steps(conditions: Mapping[str, Expr], graph: PlanGraph) -> list[list[str]]:
    """The conditional steps grouped by the steps their conditions name (transitively), in order.

    A condition names only steps whose results its step references (the graph's "reference"
    edges); with one such step there is nothing to look up in the condition itself."""
    parent, find = _union_find()
    for step_id, condition in conditions.items():
        referenced = [p for p in graph.pred[step_id] if graph.edges[(p, step_id)].kind == "reference"]
        if len(referenced) > 1:
            referenced = [node.name for node in walk(condition) if isinstance(node, Ident) and node.name in graph.steps]
        for name in referenced:
            parent[find(name)] = find("when:" + step_id)
    groups: dict[str, list[str]] = {}
    for step_id in conditions:
        groups.setdefault(find("when:" + step_id), []).append(step_id)
    return list(groups.values())


def _components(guards: list[Guard]) -> list[list[Guard]]:
    """Guards split by the run-time values they share (union-find over paths), in order."""
    parent, find = _union_find()
    for guard in guards:
        for path in guard.paths:
            parent[find(path)] = find("guard:" + guard.step)
    parts: dict[str, list[Guard]] = {}
    for guard in guards:
        parts.setdefault(find("guard:" + guard.step), []).append(guard)
    return list(parts.values())


def _pattern_group(encoder: Encoder, fires: list[str]) -> solve.PatternGroup:
    names = tuple(f"f{position}" for position in range(len(fires)))
    lines = encoder.declarations()
    lines += [f"(declare-const {name} Bool)\n(assert (= {name} {formula}))" for name, formula in zip(names, fires)]
    return solve.PatternGroup("\n".join(lines), names, encoder.values())


def _reason(error: BaseException) -> str:
    return error.reason if isinstance(error, Unsupported) else "the condition is nested too deeply"


def _count_text(count: int) -> str:
    """A count as a reader takes it in: `4,096`, or `over 10^301` past ten million (from its bit
    length: such a count may have more digits than Python turns into text)."""
    if count < 10 ** 7:
        return f"{count:,}"
    exponent = int((count.bit_length() - 1) * math.log10(2))  # within one of ⌊log10 count⌋
    while 10 ** exponent >= count:  # "over" holds strictly (and a rounding up is undone)
        exponent -= 1
    if 10 ** (exponent + 1) < count:
        exponent += 1
    return f"over 10^{exponent}"
