"""MultiAgent-OPD: the ``maopd`` command line and the typed-config helpers shared by all packages."""
