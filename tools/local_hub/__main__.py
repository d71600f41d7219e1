"""`python -m tools.local_hub ROOT`: see cli.py."""

from .cli import main

main()
