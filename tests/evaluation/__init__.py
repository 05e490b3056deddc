"""Tests of maopd.evaluation: the protocol, records, metrics, reports and seed statistics."""
