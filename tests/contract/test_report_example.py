"""R7's shrunk history, found by the generated histories (seed 46, history 27, 8 s in): the provider
writes a date without updating the history index, a column is added, then log clean-up removes the
commit. The backfill report of the run that made that write said ``reproduced`` - "nothing committed" -
for a run that committed; it now says ``unknown`` and names the commit whose record is gone."""

from __future__ import annotations

from airflow_provider_dltrain.backfill_report import explain, format_line
from tests.contract.harness import LakeHistory


def test_a_run_whose_commit_record_is_gone_is_reported_unknown_never_reproduced():
    state = LakeHistory()
    try:
        state.create(kind="string", horizon=False, rows=[(0, -3)])
        state.write_without_index_update(rows=[(0, -3)], which=0)
        written = state.model.latest
        state.add_column()
        state.clean_up_log(spark=False)
        state.every_date_answers_as_the_contract_says()  # R7 among the checks of this state
        run = {
            "run_id": f"run-0-{written}",
            "state": "success",
            "xcom": {"ingest": {"uri": state.uri, "version": written, "committed": True}},
        }
        report = explain("contract", state.text(0), [run])
        assert report.verdict == "unknown", report
        assert any(f"version {written}, but that commit's record is gone" in n for n in report.notes)
        assert format_line(report)[0].startswith(f"{state.text(0)}  UNKNOWN")
        # a re-run that skipped (handing back that write) still reproduced
        skipped = {
            **run,
            "run_id": "backfill-1",
            "xcom": {"ingest": {**run["xcom"]["ingest"], "committed": False}},
        }
        assert explain("contract", state.text(0), [skipped]).verdict == "reproduced"
    finally:
        state.teardown()
