"""Node hooks for slurm.conf's Prolog= and Epilog=: per-job GPU power limits under the
site's cap, and per-job GPU energy and utilisation (see prolog.py and epilog.py)."""
