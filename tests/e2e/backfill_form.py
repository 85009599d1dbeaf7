"""The Airflow UI's backfill form, filled as a user fills it (Playwright, shared by the browser tests)."""

from __future__ import annotations

import re
from typing import Any


def fill_backfill_form(
    page: Any, dag_id: str, first: str, last: str, max_active_runs: int | None = None
) -> Any:
    """Open *Trigger → Backfill* on the DAG's page, set From/To (``YYYY-MM-DD``, 00:00 UTC), choose
    *All Runs* and, when given, *Max Active Runs*; returns the dialog, checked to say how many runs
    it will trigger, ready for *Run Backfill*."""
    from datetime import date

    from playwright.sync_api import expect

    page.get_by_test_id("trigger-dag-button").click()
    dialog = page.get_by_role("dialog")
    # the card's text, as a user clicks it: the radio input itself is visually hidden, and
    # Playwright may find it outside the viewport while the dialog still opens
    dialog.get_by_text("Run this Dag for a range of dates").click()
    expect(dialog.get_by_role("radio", name="Backfill")).to_be_checked()
    heading = page.get_by_role("heading", name=f"Run Backfill - {dag_id}")
    dialog = dialog.filter(has=heading)
    for index, (field, day) in enumerate((("From", first), ("To", last))):
        dialog.get_by_test_id("datetime-input").nth(index).click()
        # the picker of "From" may still be in the page when "To" opens: name the field's own box
        page.get_by_role("textbox", name=field, exact=True).fill(day.replace("-", "/"))
        page.get_by_placeholder("HH:mm").last.fill("00:00")
        heading.click()
    dialog.get_by_role("radio", name="All Runs").check(force=True)
    if max_active_runs is not None:
        dialog.get_by_role("spinbutton").fill(str(max_active_runs))  # Max Active Runs
    runs = (date.fromisoformat(last) - date.fromisoformat(first)).days + 1
    expect(dialog.get_by_text(re.compile(rf"{runs} runs? will be triggered"))).to_be_visible()
    return dialog
