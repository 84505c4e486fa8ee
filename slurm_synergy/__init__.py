"""slurm-synergy: right-size deep-learning training jobs on Slurm GPU clusters."""

__version__ = "0.1.0"
