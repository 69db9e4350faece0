"""What the results mean: pure over result records, never a kernel library or the GPU.

:mod:`.runs` reads the benchmarks of a pytest-benchmark JSON run (the records in their
``extra_info``); :mod:`.peers` puts each result against the others of its problem (vs best, speedup,
slow paths); :mod:`.table` renders the terminal summary; :mod:`.fingerprint` says what a run was
measured on and whether two may be compared; :mod:`.baseline` stores and checks baselines;
:mod:`.gate` gives SAME / FASTER / SLOWER / NEW / MISSING; :mod:`.reports` and :mod:`.plots` write
Markdown, CSV and figures. A new verdict or report goes here; it reads records and writes text.
"""
