"""Crash and concurrency tests with real daemon processes (marked `crash`)."""
