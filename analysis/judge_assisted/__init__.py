"""Judge-assisted clinician means (prediction-powered inference; docs/judge-assisted.md).

- ``estimator`` — pure pandas/numpy: the Y/f arrays of a study and the means, differences,
  ranking and separations tables built from them (statistics from ``analysis.ppi``);
- ``selectors`` — a study's scores as those arrays, and the report a page or the API shows;
- ``charts`` — the Vega-Lite forest plot and ranking chart;
- ``views`` — the researchers' page; ``api`` — the REST endpoint.

Callers import from the module that defines a name; this package re-exports nothing.
"""
