"""One module per CLI subcommand; each exposes HELP, add_arguments(parser) and run(args) -> int."""
