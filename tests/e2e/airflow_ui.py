"""The Airflow UI in headless Chromium, driven as a user drives it (Playwright): a logged-in page, the
backfill form, a screenshot when a step fails. Shared by the browser tests."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/lib/chromium/chromium"
# Playwright waits 5 s by default: too short for a busy 2-core machine
TIMEOUT_MS = 120_000


@contextlib.contextmanager
def logged_in_page(base_url: str, user: str, password: str, dag_id: str) -> Iterator[Any]:
    """A Chromium page signed in to the api-server at ``base_url``, on the DAG's page."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: `apt-get install -y chromium` (make test does it as root)")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        context = browser.new_context(
            viewport={"width": 1600, "height": 1000},
            timezone_id="UTC",
            base_url=base_url,
            reduced_motion="reduce",
        )
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        try:
            page.goto(f"/dags/{dag_id}")
            page.get_by_label("Username").fill(user)
            page.get_by_label("Password").fill(password)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(re.compile(rf"/dags/{dag_id}"))
            yield page
        finally:
            context.close()
            browser.close()


@contextlib.contextmanager
def shot_on_failure(page: Any, artifacts: Path, name: str) -> Iterator[None]:
    """Keep ``failed-<name>.png`` of the page when the block fails."""
    try:
        yield
    except BaseException:
        page.screenshot(path=str(artifacts / f"failed-{name}.png"))
        raise


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
