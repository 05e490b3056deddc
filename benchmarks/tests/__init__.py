"""Tests of the benchmark scripts; they live with the scripts, which are not installed."""
