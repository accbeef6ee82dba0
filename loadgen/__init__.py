"""The load generator: the paper's experiments and the seed documents' benchmarks."""
