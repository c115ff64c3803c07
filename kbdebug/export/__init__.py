"""Exporters and comparisons of traces: Chrome/Perfetto trace JSON, the diff of two runs."""
