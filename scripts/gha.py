"""GitHub Actions' workflow language, as much of it as scripts/run_workflow.py needs to run a workflow file as
written on one host: the file read (PyYAML, else ruamel.yaml), ``${{ ... }}`` expressions evaluated (contexts,
``==``/``!=``/``<``/``>``, ``&&``/``||``/``!``, ``contains``/``startsWith``/``endsWith``/``format``/``join``/
``toJSON``/``fromJSON``, the status functions, ``labels.*.name``), matrices expanded, and jobs ordered by ``needs``.
Pure: nothing here runs a command. Reference: GitHub's "Evaluate expressions in workflows and actions".
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def load(path: Path) -> dict[str, Any]:
    """The workflow file as data. YAML 1.1 (PyYAML) reads the key ``on`` as True: put back as "on"."""
    text = path.read_text()
    try:
        import yaml

        data = yaml.safe_load(text)
    except ImportError:
        try:
            from ruamel.yaml import YAML
        except ImportError:
            raise SystemExit("run_workflow.py needs PyYAML (pip install pyyaml; the dev extra has it) or"
                             " ruamel.yaml") from None
        data = YAML(typ="safe").load(text)
    if not isinstance(data, dict) or "jobs" not in data:
        raise SystemExit(f"{path} is not a workflow: no 'jobs'")
    if True in data:
        data["on"] = data.pop(True)
    return data


# ---- expressions -------------------------------------------------------------------------------------------
TOKEN = re.compile(r"\s*(?:(?P<num>-?\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|<=|>=|&&|\|\||[<>!(),.\[\]*])"
                   r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))")
STATUS = ("success", "failure", "always", "cancelled")


def tokens(text: str) -> list[tuple[str, str]]:
    out, at = [], 0
    text = text.strip()
    while at < len(text):
        m = TOKEN.match(text, at)
        if m is None or m.end() == at:
            raise ValueError(f"cannot read the expression {text!r} at {text[at:]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        at = m.end()
    return out


def _loose(value: Any) -> Any:
    """GitHub's coercion for comparisons: null 0, booleans 1/0, numeric strings numbers; other strings as they are
    (compared ignoring case)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        try:
            return float(value) if value.strip() else 0
        except ValueError:
            return value.lower()
    return value


def equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    la, lb = _loose(a), _loose(b)
    return type(la) is type(lb) and la == lb if isinstance(la, str) or isinstance(lb, str) else la == lb


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", 0.0)


def text_of(value: Any) -> str:
    """A value as ``${{ }}`` puts it into a string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _contains(haystack: Any, needle: Any) -> bool:
    if isinstance(haystack, list):
        return any(equal(item, needle) for item in haystack)
    return text_of(needle).lower() in text_of(haystack).lower()


def _format(template: Any, *args: Any) -> str:
    return re.sub(r"\{(\d+)\}", lambda m: text_of(args[int(m[1])]), text_of(template)).replace("{{", "{").replace(
        "}}", "}")


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "contains": _contains,
    "startswith": lambda a, b: text_of(a).lower().startswith(text_of(b).lower()),
    "endswith": lambda a, b: text_of(a).lower().endswith(text_of(b).lower()),
    "format": _format,
    "join": lambda a, sep=",": text_of(sep).join(map(text_of, a)) if isinstance(a, list) else text_of(a),
    "tojson": lambda a: json.dumps(a, indent=2),
    "fromjson": lambda a: json.loads(text_of(a)),
    "hashfiles": lambda *a: "",
}


class Parser:
    """Recursive descent over :func:`tokens`: or -> and -> not -> comparison -> access."""

    def __init__(self, text: str, contexts: Mapping[str, Any], status: Callable[[str], bool]) -> None:
        self.toks, self.i, self.ctx, self.status = tokens(text), 0, contexts, status

    def peek(self) -> str:
        return self.toks[self.i][1] if self.i < len(self.toks) else ""

    def take(self, want: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.toks) or (want is not None and self.toks[self.i][1] != want):
            raise ValueError(f"expected {want or 'more'} in the expression at token {self.i}")
        self.i += 1
        return self.toks[self.i - 1]

    def parse(self) -> Any:
        value = self.or_()
        if self.i != len(self.toks):
            raise ValueError(f"unexpected {self.peek()!r} in the expression")
        return value

    def or_(self) -> Any:
        left = self.and_()
        while self.peek() == "||":
            self.take()
            right = self.and_()
            left = left if truthy(left) else right
        return left

    def and_(self) -> Any:
        left = self.not_()
        while self.peek() == "&&":
            self.take()
            right = self.not_()
            left = right if truthy(left) else left
        return left

    def not_(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not truthy(self.not_())
        return self.comparison()

    def comparison(self) -> Any:
        left = self.access()
        while self.peek() in ("==", "!=", "<", "<=", ">", ">="):
            op = self.take()[1]
            right = self.access()
            if op in ("==", "!="):
                left = equal(left, right) == (op == "==")
            else:
                a, b = _loose(left), _loose(right)
                left = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return left

    def access(self) -> Any:
        value = self.primary()
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                key = self.take()[1]
                value = _Star(_get(v, key) for v in value) if isinstance(value, _Star) else \
                    (_Star(value.values() if isinstance(value, dict) else value or []) if key == "*"
                     else _get(value, key))
            else:
                key = self.or_()
                self.take("]")
                value = _get(value, key)
        return list(value) if isinstance(value, _Star) else value

    def primary(self) -> Any:
        kind, text = self.take()
        if text == "(":
            value = self.or_()
            self.take(")")
            return value
        if kind == "num":
            return float(text) if "." in text else int(text)
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if self.peek() == "(":
            self.take("(")
            args = []
            while self.peek() != ")":
                args.append(self.or_())
                if self.peek() == ",":
                    self.take(",")
            self.take(")")
            if text.lower() in STATUS:
                return self.status(text.lower())
            return FUNCTIONS[text.lower()](*args)
        return self.ctx.get(text)


class _Star(list):  # type: ignore[type-arg]
    """The result of ``.*``: the next ``.name`` applies to each element."""


def _get(value: Any, key: Any) -> Any:
    if isinstance(value, dict):
        for k, v in value.items():
            if str(k).lower() == str(key).lower():
                return v
        return None
    if isinstance(value, list) and isinstance(key, (int, float)) and 0 <= int(key) < len(value):
        return value[int(key)]
    return None


def evaluate(expression: str, contexts: Mapping[str, Any], status: Callable[[str], bool] = lambda s: s != "failure"
             ) -> Any:
    """The value of ``expression`` (with or without ``${{ }}``) in ``contexts``; ``status(name)`` answers the
    status functions (``success()``, ...)."""
    text = expression.strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    return Parser(text, contexts, status).parse()


def substitute(text: str, contexts: Mapping[str, Any], later: tuple[str, ...] = ()) -> str:
    """Every ``${{ expression }}`` in ``text`` replaced by its value; one that reads a context named in ``later``
    (e.g. ``steps``, known only as the job runs) is left as written."""
    def one(m: re.Match[str]) -> str:
        if any(re.search(rf"\b{name}\.", m[1]) for name in later):
            return m[0]
        return text_of(evaluate(m[1], contexts))

    return re.sub(r"\$\{\{(.*?)\}\}", one, text, flags=re.S)


def condition(expression: Any, contexts: Mapping[str, Any], status: Callable[[str], bool]) -> bool:
    """A job's or step's ``if:`` (absent: ``success()``); one that calls no status function is ANDed with
    ``success()``, as GitHub does."""
    if expression is None:
        return status("success")
    text = str(expression)
    value = truthy(evaluate(text, contexts, status))
    if not any(re.search(rf"\b{s}\s*\(", text) for s in STATUS):
        value = value and status("success")
    return value


# ---- jobs ---------------------------------------------------------------------------------------------------
def matrix(job: Mapping[str, Any], contexts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The job's matrix combinations (``[{}]`` without a matrix): the product of its lists, with ``include``
    and ``exclude``."""
    spec = (job.get("strategy") or {}).get("matrix")
    if not spec:
        return [{}]
    if isinstance(spec, str):
        spec = evaluate(spec, contexts)
    axes = {k: v for k, v in spec.items() if k not in ("include", "exclude")}
    combos = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())] if axes else []
    combos = [c for c in combos if not any(all(c.get(k) == v for k, v in ex.items()) for ex in spec.get("exclude", []))]
    for extra in spec.get("include", []):
        matched = [c for c in combos if all(c.get(k) == v for k, v in extra.items() if k in axes)]
        if matched and all(k in axes for k in extra if k in axes):
            for c in matched:
                c.update({k: v for k, v in extra.items() if k not in axes})
        else:
            combos.append(dict(extra))
    return combos


def stages(jobs: Mapping[str, Any]) -> list[list[str]]:
    """The job ids in the order ``needs`` allows, each stage's jobs free to run together."""
    needs = {name: set(needs_of(job)) for name, job in jobs.items()}
    unknown = {n for deps in needs.values() for n in deps} - set(jobs)
    if unknown:
        raise SystemExit(f"a job needs {', '.join(sorted(unknown))}, which the workflow does not define")
    out, done = [], set()
    while len(done) < len(jobs):
        ready = [n for n in jobs if n not in done and needs[n] <= done]
        if not ready:
            raise SystemExit("the jobs' needs form a circle")
        out.append(ready)
        done.update(ready)
    return out


def needs_of(job: Mapping[str, Any]) -> list[str]:
    value = job.get("needs") or []
    return [value] if isinstance(value, str) else list(value)


def runs_on_gpu(job: Mapping[str, Any]) -> bool:
    """A job for the host's GPUs: a self-hosted runner with the label ``gpu``."""
    labels = job.get("runs-on")
    labels = [labels] if isinstance(labels, str) else list(labels or [])
    return "self-hosted" in labels and "gpu" in labels


def split(gpus: list[str], parts: int) -> list[list[str]]:
    """``gpus`` shared evenly among ``parts`` jobs, in order (the first jobs get one more where they do not divide)."""
    if parts < 1:
        return []
    base, extra = divmod(len(gpus), parts)
    out, at = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append(gpus[at:at + n])
        at += n
    return out
