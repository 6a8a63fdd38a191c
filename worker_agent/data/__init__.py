"""Data bundled with the worker agent (the demo dataset under demo/)."""
