"""A typed Python client for the MentalBench API (docs/client.md).

Hand-written and thin on purpose: the API is small (studies, ratings, reports, judge-assisted
estimates, jobs), a generated client would bring a generator's dependencies and classes for
every schema object, and a researcher reads this one in a sitting. Two dependencies, both in the
platform's lock: requests and pandas.

    from mentalbench_client import Client

    mb = Client("https://mentalbench.example", token="…")
    studies = mb.studies()
    ratings = mb.ratings(studies[0].id)             # a pandas DataFrame, streamed
    # A job, started, waited for, downloaded and checked against its SHA256SUMS:
    release = mb.release(studies[0].id, "release/")
"""

from .client import (
    ApiError,
    Client,
    Job,
    JobFailed,
    Study,
    checksums_verify,
)

__all__ = ["ApiError", "Client", "Job", "JobFailed", "Study", "checksums_verify"]
