"""`python -m vigor_cli`: the `vigor` command."""

from vigor_cli.cli import main

main()
