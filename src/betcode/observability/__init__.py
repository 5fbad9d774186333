"""Observability: structured logs, Prometheus metrics, OpenTelemetry traces.

A thin layer across the others. The domain reports what happens through the small `Observer`
interface in `hooks.py` (which imports nothing of BetCode, so any layer may call it); the
daemon installs an implementation that feeds the metrics and traces when they are switched on.
Off, every report is a call to an empty method.
"""
