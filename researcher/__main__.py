"""``python -m researcher`` runs the command line (same as the ``researcher`` script)."""

from researcher.cli import app

app(prog_name="researcher")
