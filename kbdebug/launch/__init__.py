"""Launching a kernel: the user's launch file, the scenario it builds, and --set/--grid/--config.

Shared by ``kbdebug run``, ``kbdebug sweep`` and a sweep's workers, below all of
them: ``file`` reads and runs a FILE.py, ``settings`` parses and checks values,
``launcher`` loads a scenario builder, types its parameters and builds it.
Nothing here is imported by this package itself, so ``kbdebug TRACE`` (which
only needs ``file`` for its hints) does not load the emulator.
"""
