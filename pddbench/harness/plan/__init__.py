"""Decisions before and during a replay, sans-IO: which sessions, which request when, resume.

Must not do I/O: the drive backends execute what these modules decide.
"""
