"""Hosting a leaderboard: strangers submit to a server, never into the project folder.

* :mod:`~aegisbench.service.rules` — the ``hosting:`` section of ``params.yaml`` (phases,
  limits, leases), declared once and checked on load;
* :mod:`~aegisbench.service.project` — where a hosted project keeps its state;
* :mod:`~aegisbench.service.db` — the database (SQLite in WAL mode inside the project, or
  PostgreSQL by URL): teams, submissions, their log, and the job queue (firm-queue);
* :mod:`~aegisbench.service.teams` — teams and their API tokens (only a salted hash stored);
* :mod:`~aegisbench.service.uploads` — a multipart upload turned into a submission folder
  within declared limits (zip members, expansion, names);
* :mod:`~aegisbench.service.intake` — validation with the evaluator's validator, immutable
  storage under a server-assigned id, quotas, enqueueing;
* :mod:`~aegisbench.service.scoring` — the worker's job: score once, under a lease;
* :mod:`~aegisbench.service.board` — the hosted leaderboard (standing rows), its ledger and
  its versioning;
* :mod:`~aegisbench.service.app` — the ASGI application (pages, JSON API, OpenAPI);
* :mod:`~aegisbench.service.client` — ``aegisbench submit``.
"""
