"""Tile configurations of mpskern's own kernels, per Metal GPU family: what dispatch needs
at run time (the tuner that writes the database is mpskern/tuner/, a tool).

  spaces.py    each tunable kernel's configuration space, validity rules from the device's
               limits, compile macros, generic defaults, and select() (what a dispatch uses)
  lookup.py    which configuration wins: forced > user database > family default > generic
  db.py        the tuning database format, packaged per-family defaults, the user database
"""
