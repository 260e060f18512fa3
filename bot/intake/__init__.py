"""Work that arrives outside Telegram updates: the shell, the inbox's task files, restart
recovery."""
