"""Outputs of a trace's analysis: the report (JSON, text), the diff's JSON and text spreads,
and the Chrome/Perfetto trace JSON."""
