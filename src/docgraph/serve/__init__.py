"""Entry points: the CLI (``cli.py``), the MCP server over stdio and streamable HTTP
(``mcp.py``), the JSON HTTP API with its OpenAPI document (``http.py``), bearer-token callers
(``auth.py``), and the agent tools they share (``tools.py``), all through governance."""
