"""The screens over the app: help, a one-line prompt, the breakpoint list."""
