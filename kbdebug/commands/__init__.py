"""One module per kbdebug subcommand, each with ``add_parser(subparsers)`` and ``run(args) -> int``."""
