"""Training workloads and (from the profiler issue on) the profiler that drives them."""
