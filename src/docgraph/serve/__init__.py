"""Entry points: the command-line interface (more transports arrive with the MCP issue)."""
