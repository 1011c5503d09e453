"""Stand-alone GPU benchmarks (not part of the test suite); see docs/benchmarks.md."""
