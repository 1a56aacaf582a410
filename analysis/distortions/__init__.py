"""Cognitive-distortion labelling with repeated LLM runs: consistency, consensus, evaluation.

Pure functions on plain Python / numpy / pandas (docs/architecture.md); no Django. The reference is
cognitive_distortions_paper.txt ([CD]):

- §3.3, Figure 2 — maximum label repetition across the N runs of an item (``consistency``).
- §3.4, Appendix F, Tables 2 and 7 — per-label Fleiss' kappa across runs and its average
  (``consistency``, on ``agreement.fleiss_kappa_per_label``).
- §4.1, Appendix G, Table 8 — final labels (≥ k of N runs, the two "not sure" fallbacks and the
  "Others" rule) and their distribution per configuration (``consensus``).
- §4.2 — 70:15:15 split stratified on the (dominant) label (``splits``); removal of ambiguous
  items (``consensus.unambiguous_mask``).
- §5.2–5.3, Appendix J, Table 10 — F1_random, κ_F1 and the simulated random baseline
  (``agreement`` for the formulas, ``evaluation.kappa_f1_report`` for a classifier's report,
  read from a CSV by ``predictions_csv``); final labels against clinicians' (``evaluation``).

The label set, the run conventions and the constants every module shares live in ``labels``.
Callers import from the module that defines a name; this package re-exports nothing.
"""
