"""`python -m aiayn ...` (what `torchrun -m aiayn` runs)."""

import sys

from aiayn.cli import main

sys.exit(main())
