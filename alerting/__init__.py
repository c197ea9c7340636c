"""Timeshare alerting package."""
