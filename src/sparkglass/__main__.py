"""``python -m sparkglass`` runs the CLI."""

from sparkglass.cli import main

main()
