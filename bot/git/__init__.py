"""Task worktrees: a task can run in its own git worktree on its own branch, cut from the
repository holding its directory and created under the data dir (never inside the repository).
Its card then offers Show diff, Merge (into the base branch; refused on conflict) and Discard
(refused while the worktree holds work, unless confirmed); after either, ``reopen`` cuts it again
at the same path for the task's next turn (``bot.git.worktrees``). Every git here runs through
``executors.gitguard`` (confined; the repository's hooks, fsmonitor, drivers and pager not
run), writing only where the operation must: the git directories, and for a merge the checkout;
a worktree is removed by the bot itself, not by git (``bot.git.steps``)."""
