"""Operator tools above the composition root: command line, Admin interface, web console,
statistics, reset, snapshot, faults, seed data and the dry start-up."""
