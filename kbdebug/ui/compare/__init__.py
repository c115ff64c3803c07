"""The app's compare mode: two runs on one time axis, cursors linked call by call."""
