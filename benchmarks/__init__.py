"""Evaluation protocol and performance benchmarks."""
