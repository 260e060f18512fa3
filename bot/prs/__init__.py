"""From a worktree task's card to a pull request: push its branch, open the PR, follow it."""
