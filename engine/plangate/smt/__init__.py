"""Reasoning about values known only at run time, with Z3 behind one layer.

    encode.py   CEL → SMT-LIB2 text (a partial evaluator: constants fold, the rest is encoded)
    solve.py    the text → a worker process that owns z3, under a wall-clock bound that holds
    worker.py   the worker itself (checks, maximal firing patterns)
    decide.py   `decide(condition, activation)` → never / may / must / unknown / runtime
    simple.py   branch patterns of simple field-vs-constant conditions, without the solver
    branches.py which steps of a plan can run together, and the exact worst cases over them

z3 is imported only in the worker, never in the checking process.
"""
