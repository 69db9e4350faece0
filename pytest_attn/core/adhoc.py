"""``--attn-case``: one problem from the command line, the way ``minimal_benchmark.py --batch 4
--seqlen 2048 --nheads 16 --headdim 128`` scripts are used. Pure.

    --attn-case "batch=4,seqlen=2048,heads=16,head_dim=128,causal,dtype=bf16"
    --attn-case "seqlen_q=1,seqlen_k=8192,heads=32,kv_heads=8,head_dim=128,causal"   # a decode step
    --attn-case "varlen=1,7,128,300,heads=32,kv_heads=8,head_dim=128,causal"         # a ragged batch
    --attn-case "seqlen=8192,heads=24,head_dim=128,window=1024,fwd+bwd,name=my-dit"
    --attn-case "batch=64,seqlen_q=1,seqlen_k=4096,heads=128,kv_heads=1,head_dim=576,head_dim_v=512,latent,scale=0.0722"
    --attn-case "seqlen=4096,heads=64,kv_heads=8,head_dim=64,window=127,sinks"        # GPT-OSS's sliding layers

Fields: batch, seqlen (or seqlen_q / seqlen_k), varlen=L1,L2,..., heads, kv_heads, head_dim,
head_dim_v, dtype, kv_dtype (fp8: an e4m3 KV cache), scale (the softmax scale), window=LEFT or LEFT:RIGHT,
name; flags: causal, fwd, fwd+bwd, sinks (a sink logit per head), latent (absorbed MLA: the values are the
key's first head_dim_v columns).
"""

from __future__ import annotations

from .case import DTYPES, CaseError, Mask, canonical_dtype
from .catalog import Shape, Variant

INTS = ("batch", "seqlen", "seqlen_q", "seqlen_k", "heads", "kv_heads", "head_dim", "head_dim_v")
FIELDS = (*INTS, "varlen", "dtype", "kv_dtype", "scale", "window", "name")
FLAGS = ("causal", "fwd", "fwd+bwd", "sinks", "latent")
#: A problem of this many queries or fewer against more keys is a decode step (suites/test_decode.py): one token,
#: or a few of a speculative step, against a KV cache.
DECODE_MAX_QUERIES = 16
FORMS = ("batch=N, seqlen=N (or seqlen_q=N, seqlen_k=N), varlen=L1,L2,..., heads=N, kv_heads=N, head_dim=N,"
         " head_dim_v=N, dtype=" + "|".join(DTYPES) + ", kv_dtype=fp8, scale=X, window=LEFT or LEFT:RIGHT,"
         " name=TEXT; flags: causal, fwd, fwd+bwd, sinks, latent")


class AdhocError(ValueError):
    pass


#: Upper bounds that keep a typo from hanging collection (batch=100000000 builds a 100M-entry tuple) or
#: overflowing later arithmetic: far above any real attention call.
LIMITS = {"batch": 1 << 16, "seqlen": 1 << 24, "seqlen_q": 1 << 24, "seqlen_k": 1 << 24, "heads": 1 << 12,
          "kv_heads": 1 << 12, "head_dim": 1 << 12, "head_dim_v": 1 << 12, "varlen": 1 << 24}
MAX_SEQUENCES = 1 << 16


def _int(field: str, text: str, spec: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise AdhocError(f"--attn-case {spec!r}: {field}={text!r} is not an integer; accepted: {FORMS}") from None
    if value <= 0:
        raise AdhocError(f"--attn-case {spec!r}: {field}={value} must be positive")
    if value > LIMITS[field]:
        raise AdhocError(f"--attn-case {spec!r}: {field}={value} is larger than {LIMITS[field]:,}, the most"
                         " pytest-attn takes (a typo? a real call of that size would not fit in GPU memory)")
    return value


def _tokens(spec: str) -> tuple[dict[str, str], list[int], set[str]]:
    """The fields, varlen lengths and flags of a spec; a field given twice is refused."""
    values: dict[str, str] = {}
    varlen: list[int] = []
    flags: set[str] = set()
    last = ""
    for raw in spec.split(","):
        token = raw.strip()
        if not token:
            continue
        if "=" in token:
            key, _, value = token.partition("=")
            key = key.strip()
            if key not in FIELDS:
                raise AdhocError(f"--attn-case {spec!r}: unknown field {key!r}; accepted: {FORMS}")
            if key in values or (key == "varlen" and varlen):
                raise AdhocError(f"--attn-case {spec!r}: {key}= is given twice; give each field once")
            if key == "varlen":
                varlen.append(_int("varlen", value.strip(), spec))
            else:
                values[key] = value.strip()
            last = key
        elif last == "varlen" and token.isdigit():
            varlen.append(_int("varlen", token, spec))
        elif token in FLAGS:
            flags.add(token)
            last = ""
        else:
            raise AdhocError(f"--attn-case {spec!r}: {token!r} is neither field=value nor a flag; accepted: {FORMS}")
    if len(varlen) > MAX_SEQUENCES:
        raise AdhocError(f"--attn-case {spec!r}: varlen= gives {len(varlen):,} sequences; at most {MAX_SEQUENCES:,}")
    return values, varlen, flags


def _mask(values: dict[str, str], flags: set[str], spec: str) -> Mask:
    mask = Mask.causal() if "causal" in flags else Mask.none()
    if "window" in values:
        left, _, right = values["window"].partition(":")
        try:
            mask = Mask.window(int(left), int(right) if right else 0)
        except ValueError:
            raise AdhocError(f"--attn-case {spec!r}: window={values['window']!r} must be LEFT or LEFT:RIGHT"
                             " (integers, -1 for unbounded)") from None
    return mask


def parse_case(spec: str) -> Variant:
    """One ``--attn-case`` value -> a :class:`Variant` (a problem; back ends come from --attn-backends)."""
    values, varlen, flags = _tokens(spec)
    ints = {k: _int(k, v, spec) for k, v in values.items() if k in INTS}
    if "heads" not in ints or "head_dim" not in ints:
        raise AdhocError(f"--attn-case {spec!r}: heads= and head_dim= are required; accepted: {FORMS}")
    dtype = canonical_dtype(values.get("dtype", "bf16"))
    if dtype not in DTYPES:
        raise AdhocError(f"--attn-case {spec!r}: dtype={dtype!r} is not one of {', '.join(DTYPES)}")
    if varlen and ({"seqlen", "seqlen_q", "seqlen_k", "batch"} & set(ints)):
        raise AdhocError(f"--attn-case {spec!r}: varlen= gives the lengths; leave out batch= and seqlen=")
    sq = ints.get("seqlen_q", ints.get("seqlen"))
    sk = ints.get("seqlen_k", ints.get("seqlen", sq))
    if not varlen and (sq is None or sk is None):
        raise AdhocError(f"--attn-case {spec!r}: give seqlen= (or seqlen_q= and seqlen_k=, or varlen=)")
    heads, kv, d = ints["heads"], ints.get("kv_heads", ints["heads"]), ints["head_dim"]
    if heads % kv:
        raise AdhocError(f"--attn-case {spec!r}: kv_heads={kv} does not divide heads={heads}")
    batch = ints.get("batch", 1)
    if varlen:
        batch, sq, sk = len(varlen), max(varlen), max(varlen)
    assert sq is not None and sk is not None
    name = values.get("name") or (
        f"adhoc-{'varlen' + str(len(varlen)) if varlen else f'b{batch}-sq{sq}-sk{sk}'}-h{heads}x{kv}-d{d}")
    if any(c.isspace() or c in "/\\[]" for c in name):
        raise AdhocError(f"--attn-case {spec!r}: name={name!r} must have no spaces, slashes or brackets (it names"
                         " the test and the files written for it)")
    if "fwd" in flags and "fwd+bwd" in flags:
        raise AdhocError(f"--attn-case {spec!r}: give one direction, fwd or fwd+bwd (repeat --attn-case for both)")
    shape = Shape(name, batch, sq, sk, heads, kv, d, "causal" in flags, f"--attn-case {spec}",
                  decode=not varlen and sq < sk and sq <= DECODE_MAX_QUERIES, seqlens=tuple(varlen),
                  head_dim_v=ints.get("head_dim_v", d), sinks="sinks" in flags, latent_kv="latent" in flags,
                  kv_dtype=values.get("kv_dtype"), softmax_scale=_scale(values, spec))
    variant = Variant(shape, dtype, _mask(values, flags, spec), "fwd+bwd" if "fwd+bwd" in flags else "fwd")
    try:
        variant.case("adhoc")  # the case's own checks (a form's dims, its direction), said now with the spec
    except CaseError as exc:
        raise AdhocError(f"--attn-case {spec!r}: {exc}") from None
    return variant


def _scale(values: dict[str, str], spec: str) -> float | None:
    if "scale" not in values:
        return None
    try:
        return float(values["scale"])
    except ValueError:
        raise AdhocError(f"--attn-case {spec!r}: scale={values['scale']!r} is not a number") from None
