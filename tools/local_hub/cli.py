"""Serve a folder as a local Hub until interrupted: `python -m tools.local_hub ROOT` prints the variables to export."""

from __future__ import annotations

import argparse
import sys
import threading
from urllib.parse import quote

from .server import LocalHub


def main(argv: list[str] | None = None) -> None:
    """`python -m tools.local_hub ROOT`: serve a folder until interrupted."""
    # The package's first docstring line, as the help said when the server was one module.
    summary = sys.modules[__package__].__doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m tools.local_hub", description=summary)
    parser.add_argument("root_dir", help="folder holding the repositories")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--user", default="local-user", help="account name the token belongs to")
    parser.add_argument("--token", help="write token to accept (default: a new random one)")
    args = parser.parse_args(argv)
    with LocalHub(args.root_dir, token=args.token, port=args.port, user=args.user) as hub:
        print("Local hub running. Set these before importing huggingface_hub or transformers:")
        for name, value in hub.environment().items():
            print(f"  export {name}={quote(value, safe=':/._-')}")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
