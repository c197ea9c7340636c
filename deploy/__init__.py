"""Timeshare deploy package."""
