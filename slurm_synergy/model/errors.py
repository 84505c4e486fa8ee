"""The errors the `synergy` command reports as one clear line and a non-zero exit."""


class SynergyError(Exception):
    """A failure the user can act on; the message names what and where."""


class SlurmError(SynergyError):
    """A Slurm command failed or Slurm could not be reached."""


class SlurmUnreachable(SlurmError):
    """slurmctld (or slurmdbd, for sacct) did not answer: what the call did is unknown."""
