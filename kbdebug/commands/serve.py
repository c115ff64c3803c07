"""`kbdebug serve TRACE`: the same app in a browser, served by textual-serve."""

from __future__ import annotations

import argparse
import re
import shlex
import socket
import sys
from pathlib import Path

from kbdebug.commands.replay import bundled_trace, check_header
from kbdebug.errors import UserError

#: What pip installs to make ``kbdebug serve`` available.
INSTALL_HINT = "pip install 'kbdebug[serve]'"
DEFAULT_HOST = "localhost"
DEFAULT_PORT = 8000
#: Hosts that only this machine can reach; any other is said to be shared when serving.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")

DESCRIPTION = """\
Serve the debugger on a trace to a web browser: each browser tab that opens the
address runs its own copy of the app (the same screens and keys as in the
terminal) on this machine, over textual-serve.

It listens on localhost unless --host says otherwise: --host 0.0.0.0 lets anyone
who can reach this machine's port open the app (and read the trace's sources),
so share it only on a network you trust, or keep localhost and forward the port
(ssh -L 8000:localhost:8000 HOST). Ctrl+C stops it.

It needs textual-serve: pip install 'kbdebug[serve]'.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve the app on a trace to a web browser",
        description=DESCRIPTION,
        epilog="example:\n  kbdebug serve decode.kbt --port 8000   # then open http://localhost:8000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "trace", metavar="TRACE", nargs="?", help="a .kbt trace (default: the bundled one)"
    )
    p.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT})"
    )
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default: {DEFAULT_HOST}, this machine only)",
    )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535, not {port}")
    return port


def _check_port(host: str, port: int, shown: str) -> None:
    """Refuse a host that does not resolve or a port already taken, before saying "serving"."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise UserError(f"--host {shown}: cannot resolve it: {e.strerror or e}") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            # As aiohttp binds: an address in TIME_WAIT is free to take again.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as e:
                raise UserError(f"cannot listen on {shown}:{port}: {e.strerror or e}") from None


def run(args: argparse.Namespace) -> int:
    try:
        from textual_serve.server import Server
    except ImportError:
        raise UserError(f"textual-serve is not installed: {INSTALL_HINT}") from None
    path = bundled_trace() if args.trace is None else Path(args.trace)
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not a trace")
    check_header(path)  # a bad trace is one line here, not a broken page in the browser
    host = args.host
    if not re.fullmatch(r"[A-Za-z0-9.:\-\[\]]{1,253}", host):
        raise UserError(f"--host {shlex.quote(host)[:80]}: not a host name or address")
    # Each browser session runs this command: the same app `kbdebug TRACE` opens.
    command = shlex.join([sys.executable, "-m", "kbdebug", "replay", str(path.resolve())])
    title = "kbdebug " + re.sub(r"[^\w.\-]", "_", path.name)[:80]
    server = Server(command, host=host, port=args.port, title=title)
    shown = f"[{host}]" if ":" in host else host
    _check_port(host, args.port, shown)
    print(f"serving {path} at http://{shown}:{args.port} (open it in a browser; Ctrl+C stops)")
    if host not in LOCAL_HOSTS:
        print(f"note: listening on {host}: anyone who can reach this port can open the app")
    try:
        server.serve()
    except OSError as e:
        raise UserError(f"cannot listen on {shown}:{args.port}: {e.strerror or e}") from None
    return 0
