"""The champion for a date is found by month, not by reading the whole promotion history."""

from __future__ import annotations

import pytest

from airflow_provider_dltrain.registry import GateSpec, champion_as_of, champion_history, register_and_promote

MODEL = "digits"
LOSS = GateSpec(metric="val_loss", mode="min")
# cut-off -> val_loss: every one improves, so every one is promoted; March to July is a gap of months
PROMOTIONS = {"2025-12-28": 0.9, "2026-01-15": 0.8, "2026-03-10": 0.7, "2026-03-20": 0.6, "2026-07-01": 0.5}


@pytest.fixture
def history(tracking, train):
    versions = {}
    for cutoff, loss in PROMOTIONS.items():
        result = train(cutoff, {"val_loss": loss})
        decision = register_and_promote(
            tracking,
            model_name=MODEL,
            model_uri=result["model_uri"],
            run_id=result["run_id"],
            metrics=result["metrics"],
            gate=LOSS,
            data_cutoff=cutoff,
        )
        assert decision.promoted, decision.reason
        versions[cutoff] = decision.version
    return versions


def _full_scan_answer(tracking, day):
    """The definition: the greatest promotion key among cut-offs at or before ``day``."""
    eligible = [mv for mv in champion_history(tracking, MODEL) if mv.champion_key("champion")[0] <= day]
    return eligible[-1].version if eligible else None


def test_the_champion_for_every_kind_of_date_matches_the_whole_history(tracking, history):
    for day in [
        "2025-12-27",  # before the first promotion
        "2025-12-28",  # on a promotion's cut-off
        "2026-01-01",  # the year turned: December's promotion
        "2026-02-14",  # a month without a promotion
        "2026-03-15",  # between two promotions of one month
        "2026-03-31",
        "2026-06-30",  # three months after the last promotion: the whole history is read
        "2026-07-01",
        "2026-12-31",
    ]:
        found = champion_as_of(tracking, MODEL, day)
        assert (found.version if found else None) == _full_scan_answer(tracking, day), day
    assert champion_as_of(tracking, MODEL, "2026-03-25").version == history["2026-03-20"]
    assert (
        champion_as_of(tracking, MODEL, "2026-03-25", exclude_version=history["2026-03-20"]).version
        == (history["2026-03-10"])
    )


def test_a_date_in_a_month_with_promotions_asks_for_that_month_only(tracking, history, monkeypatch):
    from mlflow import MlflowClient

    searches: list[tuple[str, int]] = []
    real = MlflowClient.search_model_versions

    def counted(self, filter_string=None, *args, **kwargs):
        page = real(self, filter_string, *args, **kwargs)
        searches.append((filter_string, len(page)))
        return page

    monkeypatch.setattr(MlflowClient, "search_model_versions", counted)
    assert champion_as_of(tracking, MODEL, "2026-03-25").version == history["2026-03-20"]
    assert searches == [(f"name = '{MODEL}' and tags.`dltrain.champion_from` LIKE '2026-03-%'", 2)]
    searches.clear()
    assert champion_as_of(tracking, MODEL, "2026-02-14").version == history["2026-01-15"]
    assert [rows for _, rows in searches] == [0, 1]  # February, then January


def test_a_plan_of_many_dates_asks_the_registry_once_and_answers_each_date_as_alone(
    tracking, history, monkeypatch
):
    """A wide block (a backfill plan of more than a quarter) answers the month-by-month questions from
    one search of every version; each date's champion is the one its own lookup finds."""
    from datetime import date, timedelta

    from mlflow import MlflowClient

    from airflow_provider_dltrain.store.client import mlflow_client, versions_tagged
    from airflow_provider_dltrain.utils.snapshot import snapshot

    days = [(date(2025, 12, 20) + timedelta(days=i)).isoformat() for i in range(0, 240, 3)]
    alone = [getattr(champion_as_of(tracking, MODEL, d), "version", None) for d in days]
    by_month = {
        m: versions_tagged(mlflow_client(tracking), MODEL, "dltrain.champion_from", m)
        for m in ("2026-03-", "")
    }
    searches: list[str] = []
    real = MlflowClient.search_model_versions

    def counted(self, filter_string=None, *args, **kwargs):
        searches.append(filter_string)
        return real(self, filter_string, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "search_model_versions", counted)
    with snapshot(wide=True):
        together = [getattr(champion_as_of(tracking, MODEL, d), "version", None) for d in days]
        tagged = {
            m: versions_tagged(mlflow_client(tracking), MODEL, "dltrain.champion_from", m) for m in by_month
        }
    assert together == alone and set(alone) >= set(history.values())
    assert tagged == by_month and [v.version for v in tagged["2026-03-"]] != []
    assert searches == [f"name = '{MODEL}'"]
    searches.clear()
    with snapshot():  # a narrow block: a search per month, as a nightly asks
        assert champion_as_of(tracking, MODEL, "2026-03-25").version == history["2026-03-20"]
    assert searches == [f"name = '{MODEL}' and tags.`dltrain.champion_from` LIKE '2026-03-%'"]
