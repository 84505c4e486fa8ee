"""One data-parallel job over GPUs of different types (Zeus²'s problem, modelled without
its shortcuts): each type's batch share and power limit from measured traces."""
