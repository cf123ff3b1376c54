from flowctl.cli import main

main()
