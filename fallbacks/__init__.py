"""Timeshare fallbacks package."""
