"""The paired A/B's measuring side, in one place: two builds of a kernel measured in turns on one GPU.

Modules: :mod:`.spec` (what an arm is: ``--attn-ab``'s ``ARM_A,ARM_B``, a folder, a Python, ``same``, a
slowdown), :mod:`.messages` (the typed requests and answers between the controller and an arm's worker),
:mod:`.processes` (the controller's side: a worker process per replica, asked one message at a time),
:mod:`.worker` (the worker: prepares a case, samples blocks, hands its samples over), :mod:`.pairing` (the
turns in ABBA order, replica after replica, and the stopping rule beside them), :mod:`.clockprobe` (a block's
mean SM clock, read on the GPU). The verdicts are :mod:`pytest_attn.verdicts.ab`'s; the pytest wiring is
:mod:`pytest_attn.plugin.ab`.
"""
