"""``python -m pddbench`` runs the command line."""

from pddbench.cli import main

main()
