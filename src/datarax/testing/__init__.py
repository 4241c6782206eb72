"""Test helpers any datarax source or pipeline can be run through: exact resume
(:func:`check_resume_exact`) and the source conformance table (:mod:`.conformance`)."""

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
