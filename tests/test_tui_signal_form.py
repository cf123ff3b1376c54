"""The signal form (issue 17, item 5): the awaited signal's name is the name field's value,
not a grey placeholder, so enter sends it; typing replaces it; and keys typed right after
the form opens land in the focused field, not in another widget or the list behind."""

from __future__ import annotations

import pytest
from test_tui import Seeded, flows, pilot_test, seeded, settle  # noqa: F401  (fixtures: runs in every status)
from textual import events
from textual.widgets import Input

from flowctl.model import RunStatus
from flowctl.tui import FlowctlApp, SignalScreen

pytestmark = pytest.mark.tui

NAMED = {"tab": "\t", "enter": "\r"}


def burst(app: FlowctlApp, *keys: str) -> None:
    """Post key events all at once, with no turn of the event loop between them (Pilot's
    press waits for the app to be idle after each key, which hides this race)."""
    for key in keys:
        char = NAMED.get(key, key)
        name = {
            "{": "left_curly_bracket",
            "}": "right_curly_bracket",
            '"': "quotation_mark",
            ":": "colon",
            "-": "minus",
        }.get(key, key)
        app.post_message(events.Key(name, char))


@pilot_test
async def test_enter_on_the_prefilled_name_sends_the_awaited_signal(seeded: Seeded) -> None:  # noqa: F811
    waiting = seeded.ids["waiting"][0]
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("3")
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        assert isinstance(app.screen, SignalScreen)
        name = app.screen.query_one("#signal-name", Input)
        assert name.value == "approved" and name.has_focus
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, SignalScreen)
    [(sent, payload, _at)] = seeded.store.pending_signals(waiting)
    assert (sent, payload) == ("approved", None)


@pilot_test
async def test_keys_typed_at_once_after_s_land_in_the_name_field(seeded: Seeded) -> None:  # noqa: F811
    waiting = seeded.ids["waiting"][0]
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("3")
        await settle(pilot)
        # one burst, as a terminal delivers fast typing: the keys reach the app before the
        # form is mounted, and must not reach the list (j/k move it, p pauses, c cancels),
        # be dropped, or land in the payload field
        burst(app, "s", *"jkpc-done", "tab", *'{"n":1}')
        await settle(pilot)
        assert isinstance(app.screen, SignalScreen)
        name = app.screen.query_one("#signal-name", Input)
        payload = app.screen.query_one("#signal-payload", Input)
        assert (name.value, payload.value) == ("jkpc-done", '{"n":1}')  # typing replaced the name
        await pilot.press("enter")
        await settle(pilot)
    [(sent, data, _at)] = seeded.store.pending_signals(waiting)
    assert (sent, data) == ("jkpc-done", {"n": 1})
    assert seeded.store.get_run(waiting).status is RunStatus.WAITING  # not paused nor cancelled


@pilot_test
async def test_a_run_waiting_for_nothing_gets_an_empty_name_with_a_hint(seeded: Seeded) -> None:  # noqa: F811
    app = FlowctlApp(store=seeded.store, clock=seeded.clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("2")  # a sleeper: it awaits no signal (a signal is buffered for later)
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        name = app.screen.query_one("#signal-name", Input)
        assert name.value == "" and name.placeholder.startswith("signal name")
