"""`python -m plangate …`: the same command line as the `plangate` script."""

import sys

from plangate.cli import main

sys.exit(main())
