"""Command lines for the distributed launchers, and network emulation."""
