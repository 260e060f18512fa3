"""Model presets, spend, daily caps and task budgets."""
