"""Timeshare pool package."""
