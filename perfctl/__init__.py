"""perfctl: hardware-counter measurement for x86 Linux fleets."""

__version__ = "0.1.0"
