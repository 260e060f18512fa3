"""A task's own git worktree and branch, and the card's Show diff / Merge / Discard."""
