"""The `mbds` command line, on top of the core (mbds/) and the benchmarks (loadgen/)."""
