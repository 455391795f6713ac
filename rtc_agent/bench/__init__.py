"""Benchmarks mounted by the CLI (``rtc-agent bench ...``)."""
