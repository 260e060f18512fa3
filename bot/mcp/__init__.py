"""`detach mcp`: Detach as a tool for other agents (an MCP server)."""
