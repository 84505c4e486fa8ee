"""A job measured while it trains: the supervisor, its windows, the memory followed to
the end, and the attach of a plain script's tree."""
