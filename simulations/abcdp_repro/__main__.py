"""``python -m simulations.abcdp_repro``."""

import sys

from simulations.abcdp_repro.cli import main

sys.exit(main())
