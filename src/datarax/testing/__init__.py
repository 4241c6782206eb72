"""Test helpers any datarax source or pipeline can be run through.

* :func:`check_resume_exact` — output unchanged after JSON checkpoint/restore at
  arbitrary points, also across epoch boundaries and after repeated restores.
* :func:`check_source_resume_exact` — the same for ``for record in source`` with
  ``source.get_state()`` / ``set_state()``.
* :func:`collect` / :func:`iterate_epochs` — the batches of several epochs.
* :func:`json_round_trip` — a state written to JSON text and read back.
* :mod:`datarax.testing.conformance` — the source conformance table's checks
  (:class:`SourceRow` and one ``check_*`` function per contract clause).
"""

from datarax.testing.conformance import (
    SourceRow,
    check_close_releases_threads,
    check_epochs,
    check_kind,
    check_nnx_state_small,
    check_restore_live,
    check_resume,
    check_shards,
    check_spec,
    orbax_round_trip,
    run_epochs,
)

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
    "SourceRow",
    "check_close_releases_threads",
    "check_epochs",
    "check_kind",
    "check_nnx_state_small",
    "check_restore_live",
    "check_resume",
    "check_shards",
    "check_spec",
    "orbax_round_trip",
    "run_epochs",
    "check_resume_exact",
    "check_source_resume_exact",
    "collect",
    "compare_batches",
    "iterate_epochs",
    "json_round_trip",
    "to_host",
]
