"""Pure statistics for perfctl: arrays in, frozen result objects out; no I/O, no printing."""
