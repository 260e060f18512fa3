"""Who may read the board: one-time sign-in links, sessions, CSRF tokens, Mini App ``initData``.

A sign-in link carries a token signed with a key derived from the bot token (HMAC-SHA256): the
shell (`detach board`) and the bot share that token, not a process, so the shell can make a
link without writing to the bot's database. The link is one-time because the board keeps the
nonces it redeemed until they expire, and refuses every token made before the board started
(a restart forgets the redeemed nonces, so an older link could otherwise be used again). That
is why nothing of it is stored in the database: no migration, and a lost link is only valid
``LINK_TTL_S``.

A session is a random token in an HttpOnly, SameSite=Strict cookie (or, inside Telegram's Mini
App, where a cookie of another site is not sent, an ``Authorization: Bearer`` header); the board
keeps only its SHA-256 with the user, expiry and the session's CSRF token, in memory: a restart
signs everybody out. An ended session is remembered a while longer, only to ask its user to
sign in again in their own language."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from aiogram.utils.web_app import safe_parse_webapp_init_data

from bot.errors import DetachError

LINK_TTL_S = 600.0
SESSION_TTL_S = 12 * 3600.0
INIT_DATA_MAX_AGE_S = 3600.0
CLOCK_SKEW_S = 60.0  # how far ahead of ours Telegram's clock may be
COOKIE = "detach_board"
_LINK_PURPOSE = b"detach-board-link"


class Refused(DetachError):
    """A link, session or ``initData`` that does not sign anybody in (the reason, for logs)."""


def link_key(bot_token: str) -> bytes:
    """The key sign-in links are signed with (never the bot token itself)."""
    return hmac.new(bot_token.encode(), _LINK_PURPOSE, hashlib.sha256).digest()


def make_link_token(key: bytes, user_id: int, now: float | None = None) -> str:
    """A one-time sign-in token for ``user_id``, valid ``LINK_TTL_S`` from ``now``."""
    issued = time.time() if now is None else now
    claims = {"u": user_id, "i": issued, "n": secrets.token_urlsafe(12)}
    body = _b64(json.dumps(claims, separators=(",", ":")).encode())
    return f"{body}.{_b64(_sign(key, body))}"


@dataclass(frozen=True, slots=True)
class Session:
    user_id: int
    csrf: str
    expires: float


class BoardAuth:
    """The board's sign-ins; ``clock`` is wall time in seconds (a seam for tests)."""

    def __init__(
        self,
        bot_token: str,
        allowed_users: Collection[int],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._token = bot_token
        self._key = link_key(bot_token)
        self._allowed = frozenset(allowed_users)
        self._clock = clock
        self._started = clock()
        self._redeemed: dict[str, float] = {}  # nonce -> when its link expires
        self._sessions: dict[str, Session] = {}  # sha256(session token) -> session

    def link_token(self, user_id: int) -> str:
        return make_link_token(self._key, user_id, self._clock())

    def redeem(self, token: str) -> tuple[str, Session]:
        """A new session for the link's user; the link never works again. Raises Refused."""
        user_id, issued, nonce = self._claims(token)
        now = self._clock()
        self._redeemed = {n: e for n, e in self._redeemed.items() if e > now}
        if issued < self._started - 1 or now > issued + LINK_TTL_S:
            raise Refused("an expired link")
        if nonce in self._redeemed:
            raise Refused("a link used before")
        self._redeemed[nonce] = issued + LINK_TTL_S
        return self._open(user_id)

    def from_init_data(self, init_data: str) -> tuple[str, Session]:
        """A session for the Mini App's user: ``initData`` signed with the bot token, at most
        an hour old and not from the future, of an allowed user. Raises Refused."""
        try:
            data = safe_parse_webapp_init_data(self._token, init_data)
        except ValueError as exc:
            raise Refused("initData not signed by Telegram for this bot") from exc
        age_s = self._clock() - data.auth_date.timestamp()
        if age_s > INIT_DATA_MAX_AGE_S:
            raise Refused("stale initData")
        if age_s < -CLOCK_SKEW_S:
            raise Refused("initData from the future")
        if data.user is None:
            raise Refused("initData without a user")
        return self._open(data.user.id)

    def session(self, token: str | None) -> Session | None:
        """The live session of this token, or None."""
        if not token:
            return None
        found = self._sessions.get(_digest(token))
        if found is None or found.expires <= self._clock() or found.user_id not in self._allowed:
            return None
        return found

    def known(self, token: str | None, link: str | None = None) -> int | None:
        """Whose the session ``token`` was, live or expired (sessions are remembered a
        ``SESSION_TTL_S`` past their end), else whose the signed sign-in ``link`` token is,
        used or expired: only for an allowed user. Says in which language to ask somebody
        to sign in; never signs anybody in."""
        found = self._sessions.get(_digest(token)) if token else None
        user_id = found.user_id if found is not None else None
        if user_id is None and link:
            try:
                user_id = self._claims(link)[0]
            except Refused:
                return None
        return user_id if user_id in self._allowed else None

    def _claims(self, token: str) -> tuple[int, float, str]:
        """A link token's user, issue time and nonce, when its signature holds. Raises Refused."""
        body, _, signature = token.partition(".")
        try:
            good = hmac.compare_digest(_unb64(signature), _sign(self._key, body))
        except ValueError as exc:
            raise Refused("a malformed link") from exc
        if not good:
            raise Refused("a forged link")
        try:
            claims = json.loads(_unb64(body))
            return int(claims["u"]), float(claims["i"]), str(claims["n"])
        except (ValueError, TypeError, KeyError) as exc:
            raise Refused("a malformed link") from exc

    def close(self, token: str) -> None:
        """The session ends now (``known`` still says whose it was)."""
        found = self._sessions.get(_digest(token))
        if found is not None:
            self._sessions[_digest(token)] = dataclasses.replace(found, expires=self._clock())

    def _open(self, user_id: int) -> tuple[str, Session]:
        if user_id not in self._allowed:
            raise Refused(f"user {user_id} is not allowed")
        now = self._clock()
        forget = now - SESSION_TTL_S  # an expired one is kept a while for ``known``
        self._sessions = {k: s for k, s in self._sessions.items() if s.expires > forget}
        token = secrets.token_urlsafe(32)
        session = Session(user_id, secrets.token_urlsafe(24), now + SESSION_TTL_S)
        self._sessions[_digest(token)] = session
        return token, session


def _sign(key: bytes, body: str) -> bytes:
    return hmac.new(key, body.encode(), hashlib.sha256).digest()


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
