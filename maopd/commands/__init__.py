"""The ``maopd`` subcommands, one module per command group."""
