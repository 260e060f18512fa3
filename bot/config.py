"""Where Detach's settings and data live, whatever the shell's directory: the settings file is
``DETACH_ENV_FILE`` if set, else ``~/.config/detach/env``, else ``./.env``; the data directory
is ``DETACH_DATA_DIR``, else ``~/.local/share/detach`` (XDG), except that an earlier install's
``./data`` holding a database keeps being used, with a note on how to move it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from bot.errors import ConfigError
from bot.models import Phrase
from bot.settings import Settings

ENV_FILE_VAR = "DETACH_ENV_FILE"
DATABASE = "detach.sqlite"


ALIVE_FILE = "bot.alive"  # in the data directory: the running bot's heartbeat (its intake's)


def config_home(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or str(_home(environ) / ".config")
    return Path(base) / "detach"


def data_home(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_DATA_HOME") or str(_home(environ) / ".local" / "share")
    return Path(base) / "detach"


def env_file(environ: Mapping[str, str], cwd: Path) -> Path | None:
    """The settings file in use: ``DETACH_ENV_FILE`` (which must exist), else the config
    home's ``env``, else ``./.env``; None when there is none (environment variables only)."""
    given = environ.get(ENV_FILE_VAR)
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            said = Phrase("setupfile.no_env_file", {"var": ENV_FILE_VAR, "given": given})
            raise ConfigError(f"{ENV_FILE_VAR}={given}: there is no such file", said)
        return path
    for candidate in (config_home(environ) / "env", cwd / ".env"):
        if candidate.is_file():
            return candidate
    return None


def legacy_data_dir(cwd: Path) -> Path | None:
    """An earlier install's ``./data`` (the default before the config home), if it holds a
    database."""
    old = cwd / "data"
    return old if (old / DATABASE).is_file() else None


def describe(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    """One line for ``detach --help`` and the start-up log: which settings file is read."""
    environ = os.environ if environ is None else environ
    try:
        path = env_file(environ, cwd or Path.cwd())
    except ConfigError as exc:
        return str(exc)
    where = str(path) if path else "none found (environment variables only)"
    return (
        f"settings file: {where}; looked for ${ENV_FILE_VAR}, "
        f"{config_home(environ) / 'env'}, ./.env"
    )


def settings_words(environ: Mapping[str, str], cwd: Path) -> Phrase | str:
    """``describe`` in any language (the shell says it in the terminal's)."""
    try:
        path = env_file(environ, cwd)
    except ConfigError as exc:
        return exc.words
    where: Phrase | str = str(path) if path else Phrase("shell.settings_none")
    params = {"path": where, "var": ENV_FILE_VAR, "home": str(config_home(environ) / "env")}
    return Phrase("shell.settings_file", params)


def load_settings(
    environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> tuple[Settings, list[Phrase]]:
    """The settings (environment variables over the settings file), and notes for the person
    starting Detach (such as an earlier ./data still in use). A mistake in them is a
    ConfigError with one line per setting, saying what to fix."""
    environ = os.environ if environ is None else environ
    cwd = cwd or Path.cwd()
    path = env_file(environ, cwd)
    try:
        settings = Settings(_env_file=path)  # type: ignore[call-arg]
    except ValidationError as exc:
        raise ConfigError(*_explain(exc, path)) from None
    notes: list[Phrase] = []
    if "data_dir" not in settings.model_fields_set:
        old = legacy_data_dir(cwd)
        new = data_home(environ)
        if old is not None and not (new / DATABASE).exists():
            said = {"old": str(old.resolve()), "new": str(new), "parent": str(new.parent)}
            notes.append(Phrase("setupfile.earlier_data_dir", said))
            settings = settings.model_copy(update={"data_dir": old.resolve()})
        else:
            settings = settings.model_copy(update={"data_dir": new})
    return settings, notes


def _explain(exc: ValidationError, path: Path | None) -> tuple[str, Phrase]:
    """One line per setting: its variable, where it is set, and what is wrong (pydantic's
    words, technical); in the log's English, and as a phrase for the terminal's language."""
    where: Phrase | str = Phrase("setupfile.in_file", {"path": str(path)}) if path else ""
    source = f" (in {path} or the environment)" if path else ""
    english, lines = [], []
    for error in exc.errors():
        name = "DETACH_" + "_".join(str(part) for part in error["loc"][:1]).upper()
        message = str(error.get("ctx", {}).get("error") or error["msg"])
        english.append(f"{name}{source}: {message}")
        lines.append(
            Phrase("setupfile.invalid", {"name": name, "where": where, "message": message})
        )
    return "\n".join(english), Phrase("setupfile.invalid_lines", {"lines": lines})


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or Path.home())
