"""Policies: compilation into one frozen `CompiledPolicy` (`compiled`) and per-call decisions."""
