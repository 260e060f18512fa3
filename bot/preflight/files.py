"""The files a held task came with (a chat message's attachment), kept beside its hold under
``root/<hold id>/`` until the hold starts the task (they go into its directory) or is dropped."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path


class HeldAttachments:
    def __init__(self, root: Path) -> None:
        self.root = root

    def keep(self, hold_id: int, staged: Sequence[Path]) -> None:
        """Move ``staged`` (the chat's staging) beside hold ``hold_id``."""
        if not staged:
            return
        target = self.root / str(hold_id)
        target.mkdir(parents=True, exist_ok=True)
        for path in staged:
            shutil.move(path, target / path.name)

    def of(self, hold_id: int) -> list[Path]:
        """The files kept for ``hold_id`` (none: an empty list)."""
        target = self.root / str(hold_id)
        return sorted(target.iterdir()) if target.is_dir() else []

    def forget(self, hold_id: int) -> None:
        """What is left of hold ``hold_id``'s files goes (started: moved already; dropped)."""
        shutil.rmtree(self.root / str(hold_id), ignore_errors=True)
