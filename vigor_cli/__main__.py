from vigor_cli.cli import main

main()
