"""What the results mean: pure over result records, never a kernel library or the GPU.

:mod:`.runs` reads the benchmarks of a pytest-benchmark JSON run (the records in their ``extra_info``);
:mod:`.peers` puts each result against the others of its problem (vs best, speedup, slow paths); :mod:`.table`
renders the terminal summary; :mod:`.fingerprint` says what a run was measured on and whether two may be compared;
:mod:`.baseline` stores and checks baselines, :mod:`.repeats` adds a run to one as repeats (of the same software),
and :mod:`.stored_numbers` the numbers of a stored case that feed a verdict; :mod:`.rule` gives each case its
verdict (SAME / SLOWER / FASTER / AMBIGUOUS / CLOCK / TIMER / NEW / MISSING), with :mod:`.fleet` the spread between
GPUs of the model read from a baseline's repeats and :mod:`.cycles` the check in clock cycles, and :mod:`.power`
what a baseline can catch on a GPU; :mod:`.selection` tells a baseline case this run selected and did not measure
(MISSING) from one it did not select (UNSELECTED), and :mod:`.decision` gives a run's verdict, per device model;
:mod:`.reports` and :mod:`.plots` write Markdown, CSV and figures; :mod:`.merge` joins the JSON of shards run apart,
:mod:`.reruns` the same cases run again (gated as one), :mod:`.in_doubt` the cases a run leaves in doubt gated on a
second look, and :mod:`.cli` is the ``pytest-attn merge`` command over them (and ``pytest-attn recover``, a dead
run's journal as a run). A new verdict or report goes here; it reads records and writes text.

Modules: :mod:`.runs`, :mod:`.peers`, :mod:`.table`, :mod:`.layout` (text that fits a terminal, and text from a file
printed as text), :mod:`.fingerprint`, :mod:`.baseline`, :mod:`.repeats`, :mod:`.stored_numbers`, :mod:`.fleet`,
:mod:`.verdict` (the verdicts' one vocabulary), :mod:`.rule`, :mod:`.cycles`, :mod:`.power`, :mod:`.selection`,
:mod:`.decision`, :mod:`.reports` (the gate's, over :mod:`.render`, which the A/B's share), :mod:`.plots`, the
paired A/B's verdicts and reports in :mod:`.ab`, :mod:`.merge`, :mod:`.reruns`, :mod:`.in_doubt`, :mod:`.cli` and
:mod:`.__main__` (``pytest-attn merge``, ``pytest-attn baseline add``), and :mod:`.workload_view`
(``--attn-workload``: a model step's attention time per back end).
"""
