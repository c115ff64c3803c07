"""The single-run panes (timeline, source, futures, events, findings) and what compare's
panes build on (the timeline, RowView, the source's highlighting, pane titles)."""
