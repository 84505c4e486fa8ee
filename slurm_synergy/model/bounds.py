"""What no decision may go beyond, whatever a table's header or a profile's file claims:
the decision table's hard bounds (decisions/table.py), which the shim enforces too
(rendered into its CONTRACT block), and the most a profile's fields may hold
(model/profile_read.py)."""

MAX_CPUS = 65536
MAX_MEM_MB = 64 * 1024 * 1024
MAX_GPUS = 64
MAX_WORKERS = 4096
MAX_POWER_W = 5000
MAX_PROCS = 256
