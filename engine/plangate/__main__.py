"""`python -m plangate …`: the same command line as the `plangate` script."""

from plangate.cli import console

console()
