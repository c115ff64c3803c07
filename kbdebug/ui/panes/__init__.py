"""The panes both modes show: timeline, source, futures, events and findings."""
