"""Approvals and agent questions: the desk a running turn asks, the answers from buttons,
and how they look."""
