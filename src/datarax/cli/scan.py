"""``datarax scan SOURCE``: read every record once and list the ones that are broken.

File-backed sources are opened with ``on_error="skip"``, so one pass reports every bad
record; a ``py:`` source that raises reports that one. Exit status 1 when any is bad.
"""

from __future__ import annotations

import json
from typing import Any

from datarax.cli.inspect_source import host_batches, records_in
from datarax.cli.targets import Target, as_cli_options, endless_reason
from datarax.core.errors import ConfigError, RecordError
from datarax.host.counts import count_words


def scan(target: Target, batch_size: int = 256) -> dict[str, Any]:
    """Read one pass of ``target``; returns counts and the bad records."""
    endless = endless_reason(target.source)
    if endless is not None:
        raise ConfigError(f"scan reads one pass of every record, and {endless}: give it "
                          "records_per_epoch= to scan that many draws.")
    good = 0
    stopped: dict[str, Any] | None = None  # the error of a source that raises
    try:
        for batch in host_batches(target, batch_size):
            good += records_in(batch, target.pipeline)
    except RecordError as err:
        stopped = {"path": err.path, "index": err.index, "stable_index": None, "cause": str(err)}
    reports = getattr(target.source, "skipped_records", None) or getattr(
        target.source, "skipped_documents", None
    )
    bad = [
        {"path": r.path, "index": r.index_in_file, "stable_index": r.index, "cause": r.cause}
        for r in (reports() if callable(reports) else [])
    ] + ([stopped] if stopped is not None else [])
    for record in bad:  # the config field, as this command spells it
        record["cause"] = as_cli_options(record["cause"])
    return {
        "target": target.spec,
        "source": type(target.source).__name__,
        "good": good,
        "bad": len(bad),
        "read": good + len(bad),
        "complete": stopped is None,
        "bad_records": bad,
    }


def run_scan(target: Target, *, batch_size: int = 256, as_json: bool = False) -> int:
    """Print the scan report; exit status 1 when any record is bad."""
    report = scan(target, batch_size)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        for record in report["bad_records"]:
            where = f"{record['path'] or report['target']} record {record['index']}"
            print(f"BAD {where}: {record['cause']}")
        status = (
            "" if report["complete"] else " (stopped at the first bad record: the source raises)"
        )
        print(
            f"scanned {count_words(report['read'], 'record')} of {report['target']}: "
            f"{report['good']} good, {report['bad']} bad{status}"
        )
    return 1 if report["bad"] else 0
