"""The fake Bot API with forum topics, as the Bot API documents them: the bot's private chat
with topic mode on (``getMe``'s ``has_topics_enabled``) and forum supergroups (``getChat``'s
``is_forum``); ``createForumTopic`` (a ForumTopic, and the topic's first message),
``editForumTopic``, ``closeForumTopic`` (supergroups only: refused in a private chat),
``message_thread_id`` on sends ("message thread not found" for a topic the chat does not
have), and the user's messages in a topic (``is_topic_message``, replying to the topic's first
message as Telegram shows them)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from tests.support.fake_telegram import FakeTelegram, _ApiError

ICON_COLOR = 0x6FB9F0


class FakeForum(FakeTelegram):
    def __init__(
        self, private_topics: bool = True, forums: Iterable[int] = (), **kwargs: Any
    ) -> None:
        """``private_topics``: the owner turned topic mode on for the bot's private chats;
        ``forums``: the ids of the forum supergroups (the bot manages their topics)."""
        super().__init__(**kwargs)
        self.private_topics = private_topics
        self.forums = set(forums)
        self.topics: dict[tuple[int, int], dict[str, Any]] = {}  # (chat, thread) -> topic
        self._gone: set[tuple[int, int]] = set()  # (chat, message) deleted with its topic

    def has_topics(self, chat_id: int) -> bool:
        return chat_id in self.forums if chat_id < 0 else self.private_topics

    def in_topic(self, chat_id: int, thread_id: int) -> list[dict[str, Any]]:
        """The bot's messages in that topic (its first message, the service one, left out)."""
        return [
            m
            for m in self.bot_messages(chat_id)
            if m.get("message_thread_id") == thread_id and "forum_topic_created" not in m
        ]

    def delete_topic(self, chat_id: int, thread_id: int) -> None:
        """The owner deletes the topic and everything in it."""
        del self.topics[(chat_id, thread_id)]
        kept = []
        for message in self.messages.get(chat_id, []):
            if message.get("message_thread_id") == thread_id:
                self._gone.add((chat_id, message["message_id"]))
            else:
                kept.append(message)
        self.messages[chat_id] = kept

    # -- the user's side --------------------------------------------------------------------
    async def user_message(  # type: ignore[override]
        self,
        text: str,
        user_id: int,
        chat_id: int | None = None,
        reply_to_message_id: int | None = None,
        language_code: str = "en",
        thread_id: int | None = None,
    ) -> dict[str, Any]:
        """A message in the chat, or in topic ``thread_id`` of it: there it replies to the
        topic's first message unless it replies to another."""
        chat_id = chat_id or user_id
        message: dict[str, Any] = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": self._chat(chat_id, user_id),
            "from": self.user(user_id, language_code),
            "text": text,
        }
        if text.startswith("/"):
            message["entities"] = [
                {"type": "bot_command", "offset": 0, "length": len(text.split()[0])}
            ]
        if thread_id is not None:
            if (chat_id, thread_id) not in self.topics:
                raise AssertionError(f"no topic {thread_id} in chat {chat_id}")
            message.update(message_thread_id=thread_id, is_topic_message=True)
        replied = reply_to_message_id or thread_id
        if replied is not None:
            message["reply_to_message"] = self.find_message(chat_id, replied)
        self.messages.setdefault(chat_id, []).append(message)
        await self._push({"message": message})
        return message

    async def user_voice(  # type: ignore[override]
        self,
        data: bytes,
        user_id: int,
        duration_s: int,
        kind: str = "voice",
        language_code: str = "en",
        thread_id: int | None = None,
    ) -> dict[str, Any]:
        """A voice note in the private chat, or in its topic ``thread_id`` (replying to the
        topic's first message, as Telegram shows it)."""
        if thread_id is None:
            return await super().user_voice(data, user_id, duration_s, kind, language_code)
        if (user_id, thread_id) not in self.topics:
            raise AssertionError(f"no topic {thread_id} in chat {user_id}")
        file_id = f"user-{kind}-{next(self._ids)}"
        self.files[file_id] = data
        sound = {
            "file_id": file_id,
            "file_unique_id": file_id.replace("-", ""),
            "duration": duration_s,
            "mime_type": "audio/ogg",
            "file_size": len(data),
        }
        message: dict[str, Any] = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": {"id": user_id, "type": "private"},
            "from": self.user(user_id, language_code),
            kind: sound,
            "message_thread_id": thread_id,
            "is_topic_message": True,
            "reply_to_message": self.find_message(user_id, thread_id),
        }
        self.messages.setdefault(user_id, []).append(message)
        await self._push({"message": message})
        return message

    def _chat(self, chat_id: int, user_id: int) -> dict[str, Any]:
        if chat_id == user_id:
            return {"id": chat_id, "type": "private"}
        if chat_id in self.forums:
            return {"id": chat_id, "type": "supergroup", "title": "Forum", "is_forum": True}
        return {"id": chat_id, "type": "group", "title": "Group"}

    # -- Bot API methods --------------------------------------------------------------------
    def _thread_fields(self, chat_id: int, p: dict[str, Any]) -> dict[str, Any]:
        thread_id = p.get("message_thread_id")
        if not thread_id:
            return {}
        if (chat_id, int(thread_id)) not in self.topics:
            raise _ApiError(400, "Bad Request: message thread not found")
        return {"message_thread_id": int(thread_id), "is_topic_message": True}

    def _still_there(self, p: dict[str, Any], what: str) -> None:
        if (int(p["chat_id"]), int(p["message_id"])) in self._gone:
            raise _ApiError(400, f"Bad Request: message to {what} not found")

    async def _m_editMessageText(self, p: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        self._still_there(p, "edit")
        return await super()._m_editMessageText(p)

    async def _m_editMessageReplyMarkup(self, p: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        self._still_there(p, "edit")
        return await super()._m_editMessageReplyMarkup(p)

    async def _m_deleteMessage(self, p: dict[str, Any]) -> bool:  # noqa: N802
        self._still_there(p, "delete")
        return await super()._m_deleteMessage(p)

    async def _m_getMe(self, p: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        return {**await super()._m_getMe(p), "has_topics_enabled": self.private_topics}

    async def _m_getChat(self, p: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        chat_id = int(p["chat_id"])
        chat = self._chat(chat_id, chat_id if chat_id > 0 else 0)
        gifts = dict.fromkeys(
            (
                "unlimited_gifts",
                "limited_gifts",
                "unique_gifts",
                "premium_subscription",
                "gifts_from_channels",
            ),
            False,
        )
        return {
            **chat,
            "accent_color_id": 0,
            "max_reaction_count": 11,
            "accepted_gift_types": gifts,
        }

    async def _m_createForumTopic(self, p: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        chat_id, name = int(p["chat_id"]), str(p.get("name") or "")
        if not self.has_topics(chat_id):
            raise _ApiError(400, "Bad Request: the chat is not a forum")
        if not 1 <= len(name) <= 128:
            raise _ApiError(400, "Bad Request: TOPIC_NAME_INVALID")
        created = {"name": name, "icon_color": ICON_COLOR}
        first = self._bot_message(chat_id, forum_topic_created=created, is_topic_message=True)
        thread_id = first["message_id"]
        first["message_thread_id"] = thread_id
        self.topics[(chat_id, thread_id)] = {"name": name, "closed": False}
        return {"message_thread_id": thread_id, **created}

    def _topic(self, p: dict[str, Any]) -> dict[str, Any]:
        topic = self.topics.get((int(p["chat_id"]), int(p["message_thread_id"])))
        if topic is None:
            raise _ApiError(400, "Bad Request: message thread not found")
        return topic

    async def _m_editForumTopic(self, p: dict[str, Any]) -> bool:  # noqa: N802
        topic = self._topic(p)
        if not p.get("name") or p["name"] == topic["name"]:
            raise _ApiError(400, "Bad Request: TOPIC_NOT_MODIFIED")
        topic["name"] = p["name"]
        return True

    async def _m_closeForumTopic(self, p: dict[str, Any]) -> bool:  # noqa: N802
        if int(p["chat_id"]) > 0:  # documented for forum supergroups only
            raise _ApiError(400, "Bad Request: method is available for supergroup chats only")
        topic = self._topic(p)
        if topic["closed"]:
            raise _ApiError(400, "Bad Request: TOPIC_NOT_MODIFIED")
        topic["closed"] = True
        return True
