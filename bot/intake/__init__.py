"""Work that arrives outside Telegram updates: tasks added from a shell or by an MCP client,
and the inbox's task files."""
