"""One module per `vigor` command: parse its options, call the work, render the result
(vigor_cli/cli.py registers them)."""
