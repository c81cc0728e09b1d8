"""perfctl's agent side: run control, counter backends, machine inventory, the measurement loop."""
