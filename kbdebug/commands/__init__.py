"""One module per kbdebug subcommand: ``add_parser(subparsers)`` and ``run(args) -> int``."""
