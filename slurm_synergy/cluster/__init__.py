"""The local "Slurm in a box" cluster: configuration, daemons, health."""
