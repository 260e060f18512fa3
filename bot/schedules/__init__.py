"""/every and /at: what people type, and the desk that fires schedules."""
