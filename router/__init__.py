"""Timeshare router package."""
