"""Timeshare benchmarks package."""
