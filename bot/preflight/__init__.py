"""Preflight: one cheap model call before a walk-away task starts (go, ask one question, or
refuse), never blocking the task when it fails."""
