from dgprecompile.cli.main import main

main()
