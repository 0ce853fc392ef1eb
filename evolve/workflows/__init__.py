"""What commands do, without printing: targets (a program and its constants, from an archive or a
file).

May import every package below :mod:`evolve.cli`.
"""
