"""The one app: its keys, palette, key bar, help, loading, stepping and breakpoints, and
its single-run mode."""
