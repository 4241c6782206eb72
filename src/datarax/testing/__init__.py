"""Test helpers any datarax source or pipeline can be run through.

* :func:`check_resume_exact` — output unchanged after JSON checkpoint/restore at
  arbitrary points, also across epoch boundaries and after repeated restores.
* :func:`check_source_resume_exact` — the same for ``for record in source`` with
  ``source.get_state()`` / ``set_state()``.
* :func:`collect` / :func:`iterate_epochs` — the batches of several epochs.
* :func:`json_round_trip` — a state written to JSON text and read back.
"""

from datarax.testing.resume import (
    ResumeReport,
    check_resume_exact,
    check_source_resume_exact,
    collect,
    compare_batches,
    iterate_epochs,
    json_round_trip,
    to_host,
)

__all__ = [
    "ResumeReport",
    "check_resume_exact",
    "check_source_resume_exact",
    "collect",
    "compare_batches",
    "iterate_epochs",
    "json_round_trip",
    "to_host",
]
