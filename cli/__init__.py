"""mpskern's command line (installed as mpskern.cli)."""
