"""Models and money: the chat's preset, resolving model= at capture, pricing every engine's
turns (``bot.money.pricing``), the daily cap (inclusive; <= 0 pauses all new work), the spend
summary, and answers to "extend or stop" budget questions."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date, timedelta

from bot.errors import UserInputError
from bot.models import Engine, SpendLine, Task, TaskStatus
from bot.money.presets import Preset, PresetCatalog
from bot.money.pricing import Meter, PriceList
from bot.store import Store
from bot.telegram.render import money

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SpendSummary:
    today_usd: float
    days: list[tuple[str, float]]
    top: list[Task]
    cap_usd: float | None
    # tokens and cost per engine and model over the same days, every engine's included
    models: list[SpendLine] = field(default_factory=list)


class MoneyDesk:
    def __init__(
        self,
        store: Store,
        catalog: PresetCatalog,
        daily_cap_usd: float | None,
        task_cap_usd: float | None,
    ) -> None:
        self._store = store
        self.catalog = catalog
        self.prices = PriceList(catalog.all())
        self.daily_cap_usd = daily_cap_usd
        self.task_cap_usd = task_cap_usd

    def meter(self, engine: Engine, preset: Preset | None) -> Meter:
        """The pricing of one turn of ``engine`` for a task with ``preset`` (or none)."""
        return Meter(self.prices, engine, preset)

    def counted_as(self, engine: Engine) -> Preset | None:
        """The preset whose price an unpriced model of ``engine`` is counted at."""
        return self.prices.dearest(engine)

    def resolve(self, typed: str) -> Preset:
        return resolve_preset(self.catalog, typed)

    def preset_for(
        self, chat_preset: str | None, typed: str | None, engine: Engine | None
    ) -> Preset | None:
        """model= wins; else the chat's preset (its stored name) when it fits the engine; else
        none (the CLI's default)."""
        if typed:
            preset = self.resolve(typed)
            if engine is not None and preset.engine != engine:
                raise UserInputError(
                    "money.preset_engine",
                    name=preset.name,
                    preset_engine=preset.engine,
                    engine=engine,
                )
            return preset
        chosen = self.catalog.get(chat_preset)
        if chosen is not None and (engine is None or chosen.engine == engine):
            return chosen
        return None

    async def set_chat_preset(self, chat_id: int, typed: str) -> Preset:
        preset = self.resolve(typed)
        await self._store.chats.set_preset(chat_id, preset.name)
        return preset

    async def chat_preset(self, chat_id: int) -> Preset | None:
        return self.catalog.get(await self._store.chats.preset(chat_id))

    def candidates(self, typed: str) -> list[Preset]:
        return list(self.catalog.resolve(typed).candidates)

    async def check_daily_cap(self, user_id: int) -> None:
        """Refuse new work that would start above the cap; a cap <= 0 pauses everything."""
        reason = await self.over_daily_cap(user_id)
        if reason is not None:
            raise UserInputError(reason[0], **reason[1])

    async def over_daily_cap(self, user_id: int) -> tuple[str, dict[str, str]] | None:
        cap = self.daily_cap_usd
        if cap is None:
            return None
        if cap <= 0:
            return "money.paused", {"cap": money(cap) or "0"}
        spent = await self._store.spend.day_total(user_id, self._store.spend.today())
        if spent > cap:
            return "money.daily_cap", {"spent": money(spent) or "0", "cap": money(cap) or "0"}
        return None

    async def daily_left(self, user_id: int) -> float | None:
        """What ``user_id`` may still spend today under the daily cap (None: no cap)."""
        if self.daily_cap_usd is None:
            return None
        spent = await self._store.spend.day_total(user_id, self._store.spend.today())
        return max(0.0, self.daily_cap_usd - spent)

    async def summary(self, user_id: int, days: int = 7) -> SpendSummary:
        today = date.fromisoformat(self._store.spend.today())
        since = (today - timedelta(days=days - 1)).isoformat()
        totals = await self._store.spend.by_day(user_id, since)
        series = [((today - timedelta(days=n)).isoformat(), 0.0) for n in range(days)]
        return SpendSummary(
            today_usd=totals.get(today.isoformat(), 0.0),
            days=[(d, totals.get(d, 0.0)) for d, _ in series],
            top=await self._store.tasks.top_by_cost(user_id),
            cap_usd=self.daily_cap_usd,
            models=await self._store.spend.by_model(user_id, since),
        )

    def budget_left(self, task: Task) -> float | None:
        """What the task may still spend; under a millionth (what the CLI's budget flag can
        express) counts as spent."""
        if task.max_usd is None:
            return None
        left = task.max_usd - task.total_cost_usd
        return left if left >= 1e-6 else 0.0

    def extend_amount(self, task: Task) -> float:
        """What Extend adds: what the task spent past its budget, plus the budget as it stands
        (a $0.05 task is offered its $0.05 again, not a flat dollar; without a budget, the
        per-task cap, else $1), so the extended task has that much room left, never none."""
        step = task.max_usd or self.task_cap_usd or 1.0
        over = max(0.0, task.total_cost_usd - task.max_usd) if task.max_usd is not None else 0.0
        return over + step


def resolve_preset(catalog: PresetCatalog, typed: str) -> Preset:
    """One preset for what a person typed, or a clear error naming the choices."""
    resolution = catalog.resolve(typed)
    if resolution.winner is not None:
        return resolution.winner
    if resolution.candidates:
        raise UserInputError(
            "money.ambiguous_model",
            typed=typed,
            candidates=", ".join(p.name for p in resolution.candidates),
        )
    raise UserInputError("money.unknown_model", typed=typed, closest=", ".join(resolution.closest))


# a budget outside this is a typo, not a plan (under a millionth the CLI's flag reads $0)
MIN_USD, MAX_USD = 1e-6, 100_000.0


def parse_usd(value: str | None, default: float | None) -> float | None:
    if value is None:
        return default
    try:
        amount = float(value.lstrip("$"))
    except ValueError:
        raise UserInputError("money.bad_amount", value=value) from None
    if not MIN_USD <= amount <= MAX_USD:  # also refuses nan and inf
        raise UserInputError("money.bad_amount", value=value)
    return amount


BUDGET = TaskStatus.BUDGET_EXCEEDED
