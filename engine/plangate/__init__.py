"""plangate: declarative policy and plan verification for agent and automation plans.

The public API (loaded lazily so that `plangate --version` stays fast):

- `check(plan_paths, policy_paths)` / `check_sources(...)`: the static checker (`plangate.driver`)
- `compile_policy(paths)`: `(CompiledPolicy | None, CheckResult)`: the frozen, hashed policy (None
  when a policy has an error) and the diagnostics of compiling it
- `Runtime`: the interpreter that executes a plan under a compiled policy (`RunError` when it cannot)
- `tool`: the decorator that registers a Python function as a plan tool
- `Gate`: the pre-execution gate for agent runtimes: `Gate.from_files(policies).decide(tool, args)`
- `SourceFile`, `ToolRegistry`: the inputs of `check_sources` and `Runtime`
- `CheckResult.to_dict()`: the object `plangate check --format json` prints; `GateDecision`,
  `ApprovalNeed`, `GateError`, `RunError`, `JournalError`: the gate's and the runtime's values and errors
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "check": ("plangate.driver", "check"),
    "check_sources": ("plangate.driver", "check_sources"),
    "CheckResult": ("plangate.driver", "CheckResult"),
    "compile_policy": ("plangate.driver", "compile_policy"),
    "CompiledPolicy": ("plangate.policy.compiled", "CompiledPolicy"),
    "Runtime": ("plangate.runtime.host", "Runtime"),
    "RunError": ("plangate.runtime.host", "RunError"),
    "tool": ("plangate.runtime.tools", "tool"),
    "ToolRegistry": ("plangate.runtime.tools", "ToolRegistry"),
    "Gate": ("plangate.gate", "Gate"),
    "GateDecision": ("plangate.gate", "GateDecision"),
    "GateError": ("plangate.gate", "GateError"),
    "ApprovalNeed": ("plangate.gate", "ApprovalNeed"),
    "JournalError": ("plangate.runtime.journal", "JournalError"),
    "SourceFile": ("plangate.source", "SourceFile"),
}

__all__ = ["__version__", *_LAZY]


def __dir__() -> list[str]:
    return sorted(__all__)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module_name, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module_name), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'plangate' has no attribute {name!r}")
