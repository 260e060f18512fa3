"""Everything that talks to Telegram: the outbox and its pacing, rendering, texts, the notifier,
the update journal, access."""
