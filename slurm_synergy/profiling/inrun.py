"""python -m slurm_synergy.profiling.inrun: measure/inrun/supervisor.py under the name that
job scripts generated before 2026-12 run it by."""

import sys

from slurm_synergy.measure.inrun.supervisor import main

if __name__ == "__main__":
    sys.exit(main())
