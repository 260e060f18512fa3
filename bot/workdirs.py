"""Working directories: every task runs inside one of DETACH_ALLOWED_WORKDIRS, whatever path a
person typed (``..``, symlinks and absolute paths are resolved before the check)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from bot.errors import UserInputError


class WorkdirPolicy:
    def __init__(
        self, default: Path, allowed: Iterable[Path], internal: Iterable[Path] = ()
    ) -> None:
        """``internal`` roots (the task worktrees under the data dir) hold directories the bot
        made itself: a stored task directory may be there, a typed path may not."""
        self.default = default.resolve()
        self.allowed = tuple(p.resolve() for p in allowed) or (self.default,)
        self._internal = tuple(p.resolve() for p in internal)

    def resolve(
        self, typed: str, base: Path | None = None, roots: tuple[Path, ...] | None = None
    ) -> Path:
        """An existing directory inside an allowed root, or a clear refusal."""
        text = typed.strip()
        if not text:
            raise UserInputError("workdir.missing")
        if "\x00" in text:
            raise UserInputError("workdir.not_found", path=text.replace("\x00", "␀"))
        path = Path(text).expanduser()
        if not path.is_absolute():
            path = (base or self.default) / path
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):
            if str(path) == text:
                raise UserInputError("workdir.not_found", path=text) from None
            raise UserInputError("workdir.not_found_at", path=text, tried=str(path)) from None
        if not real.is_dir():
            raise UserInputError("workdir.not_a_directory", path=text)
        if not any(real == root or real.is_relative_to(root) for root in roots or self.allowed):
            raise UserInputError(
                "workdir.outside", path=text, allowed=", ".join(str(root) for root in self.allowed)
            )
        return real

    def check(self, path: Path) -> Path:
        """A stored or configured directory, re-checked before a turn runs in it."""
        return self.resolve(str(path), roots=self.allowed + self._internal)
