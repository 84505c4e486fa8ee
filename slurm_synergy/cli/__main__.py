"""python -m slurm_synergy.cli: the synergy command."""

import sys

from slurm_synergy.cli import main

sys.exit(main())
