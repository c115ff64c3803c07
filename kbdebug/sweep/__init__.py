"""Sweeps: many runs of one scenario over a grid of parameters, each point in its own worker.

Textual-free: grid parsing, the point a worker runs, the local and Ray backends,
and the results (table, JSON, CSV, plot) that ``kbdebug sweep`` prints.
"""
