"""Background jobs: computations that can outlast a web request (a release bundle, a κ_F1
evaluation) run on the Celery workers while their page shows the fraction done (docs/jobs.md)."""
