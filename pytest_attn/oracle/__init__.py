"""The truth a kernel is checked against: an fp64 reference and the rule that compares with it.

:mod:`.reference` computes attention plainly (softmax of scaled scores, GQA by repeating kv heads,
any mask, per sequence; a sink logit per head, absorbed MLA's latent values, an fp8 KV cache dequantised by its
scales) in a wider dtype, with its gradients; :mod:`.checks` holds the error rule --
at most 2x (gradients 3x) the error of the same math in the case's dtype, plus the dtype's floor and,
for dq/dk, the term a FlashAttention backward errs by design -- on sampled rows before timing, or on
every element for the fuzzer. It knows tensors and the core vocabulary, nothing of pytest, timing or
any kernel library.

Modules: :mod:`.reference` (the fp64 math), :mod:`.checks` (the error rule), :mod:`.grad_rows` and
:mod:`.grad_check` (gradients on sampled rows, and their check before timing), :mod:`.cache` (a KV cache after an
appending call).
"""
