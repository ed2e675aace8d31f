"""Reliability and security suite: crashes, concurrency, hostile input, faults, privacy.

Every test runs over every entry point that has a factory in ``tests/factories``; the figures
go into ``docs/reliability.md`` (see ``_report.py``).
"""
