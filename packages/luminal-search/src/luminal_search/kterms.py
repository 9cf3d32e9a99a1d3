"""Kernel-level terms: the value tree of one fused kernel as an egglog term, and back.

Graph-level terms (`terms.py`) cannot see across kernels: attention is seven kernels of the
default plan. A fused region (`fusion.py`) is lowered into one kernel with everything inlined,
and its value tree, where a broadcast is simply an index that does not use a variable, goes
into this language:

    (datatype V
      (VLeaf i64)                   ; any other value (a load, a select, a cast...), whole
      (VNum f64)                    ; a float32 constant
      (VAdd V V) (VMul V V) (VExp2 V) (VRecip V)
      (VSum i64 i64 V) (VMax i64 i64 V)   ; variable, extent (index into the extent table), body
      (VSoftmaxSum i64 i64 V V))          ; variable, extent, logit, body (`ir.SoftmaxSum`)
    (function Uses (V) i64)         ; bit k: the term reads reduction variable k

Reduction variables are named canonically before encoding: a reduction takes the lowest
number no reduction inside its body that reads it has taken. So the max of a softmax (inside
the sum that uses it) and that sum get the same variable whenever their bodies are the same
expression of it, and the e-graph sees one logit term in both: a rule can then match "the sum
of exp2(x - max x) * b over v" without any renaming. `Uses` is computed in the e-graph from the
leaves' variables (a rule set "uses" run to saturation before each round).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from luminal.dtypes import float32
from luminal.symbolic import INF, Expr
from luminal_codegen.ir import (
    Binary,
    Bind,
    Const,
    Reduce,
    SoftmaxSum,
    Unary,
    Value,
    children,
    map_exprs,
    walk,
)
from luminal_codegen.render import exprs_of_shallow

VAR_PREFIX = "_rc"  # "_r": the renderer treats it as a variable bound inside the body
COSTS = {"VLeaf": 1, "VNum": 1, "VAdd": 1, "VMul": 1, "VExp2": 8, "VRecip": 4,
         "VSum": 1000, "VMax": 1000, "VSoftmaxSum": 1200}

LANGUAGE = f"""\
(datatype V
  (VLeaf i64 :cost {COSTS['VLeaf']}) (VNum f64 :cost {COSTS['VNum']})
  (VAdd V V :cost {COSTS['VAdd']}) (VMul V V :cost {COSTS['VMul']})
  (VExp2 V :cost {COSTS['VExp2']}) (VRecip V :cost {COSTS['VRecip']})
  (VSum i64 i64 V :cost {COSTS['VSum']}) (VMax i64 i64 V :cost {COSTS['VMax']})
  (VSoftmaxSum i64 i64 V V :cost {COSTS['VSoftmaxSum']}))
(function Uses (V) i64 :merge (& old new))
(ruleset uses)
(rule ((= t (VNum c))) ((set (Uses t) 0)) :ruleset uses)
(rule ((= t (VAdd a b)) (= ua (Uses a)) (= ub (Uses b))) ((set (Uses t) (| ua ub))) :ruleset uses)
(rule ((= t (VMul a b)) (= ua (Uses a)) (= ub (Uses b))) ((set (Uses t) (| ua ub))) :ruleset uses)
(rule ((= t (VExp2 a)) (= ua (Uses a))) ((set (Uses t) ua)) :ruleset uses)
(rule ((= t (VRecip a)) (= ua (Uses a))) ((set (Uses t) ua)) :ruleset uses)
(rule ((= t (VSum v n a)) (= ua (Uses a))) ((set (Uses t) (& ua (^ -1 (<< 1 v))))) :ruleset uses)
(rule ((= t (VMax v n a)) (= ua (Uses a))) ((set (Uses t) (& ua (^ -1 (<< 1 v))))) :ruleset uses)
(rule ((= t (VSoftmaxSum v n a b)) (= ua (Uses a)) (= ub (Uses b)))
      ((set (Uses t) (& (| ua ub) (^ -1 (<< 1 v))))) :ruleset uses)
"""
MAX_VARS = 62  # Uses is a 64-bit mask


def _var(k: int, size: Expr) -> Expr:
    return Expr.var(f"{VAR_PREFIX}{k}", 0, max(size.value - 1, 0) if size.is_const else INF)


def _binder(v: Value) -> bool:
    return isinstance(v, (Reduce, SoftmaxSum))


def free_vars(v: Value, memo: dict[int, frozenset[str]]) -> frozenset[str]:
    """The variable names `v` reads that nothing inside it binds (`memo` by node identity)."""
    got = memo.get(id(v))
    if got is not None:
        return got
    own: set[str] = set()
    for e in exprs_of_shallow(v):
        own |= e.free_vars
    for c in children(v):
        own |= free_vars(c, memo)
    if isinstance(v, (Reduce, SoftmaxSum, Bind)):
        own.discard(v.var.name)
    if _binder(v):
        own |= v.size.free_vars
    out = memo[id(v)] = frozenset(own)
    return out


def canonical(value: Value) -> Value:
    """`value` with every reduction's variable renamed canonically (see the module doc)."""
    memo: dict[int, Value] = {}
    free: dict[int, frozenset[str]] = {}

    def go(x: Value) -> Value:
        got = memo.get(id(x))
        if got is not None:
            return got
        changes = {f.name: go(getattr(x, f.name)) for f in fields(x)
                   if isinstance(getattr(x, f.name), Value)}
        out = replace(x, **changes) if changes else x
        if _binder(out):
            name = out.var.name
            inner = [out.body] + ([out.logit] if isinstance(out, SoftmaxSum) else [])
            taken = {int(r.var.name[len(VAR_PREFIX):]) for part in inner for r in walk(part)
                     if _binder(r) and name in free_vars(r, free)}
            k = min(set(range(len(taken) + 1)) - taken)
            new = _var(k, out.size)
            renamed = {f: map_exprs(getattr(out, f), lambda e: e.substitute({name: new}))
                       for f in ("body", "logit") if hasattr(out, f)}
            out = replace(out, var=new, **renamed)
        memo[id(x)] = out
        return out

    return go(value)


@dataclass
class Encoded:
    """A kernel value as egglog lets (`text`, root `root`), with the tables its terms index."""

    text: str
    root: str
    leaves: list[Value]
    sizes: list[Expr]


def _float(v: Value) -> bool:
    return v.dtype == float32


def encode(value: Value) -> Encoded | None:
    """The canonical form of `value` as egglog text; None when it binds more variables than
    `Uses` can hold."""
    value = canonical(value)
    leaves: dict[Value, int] = {}
    sizes: dict[Expr, int] = {}
    names: dict[int, str] = {}
    lines: list[str] = []
    uses: list[str] = []
    free: dict[int, frozenset[str]] = {}
    stack = [(value, False)]
    while stack:
        x, ready = stack.pop()
        if id(x) in names:
            continue
        structured = _float(x) and (
            isinstance(x, (Const, Reduce)) or (isinstance(x, Binary) and x.op in ("add", "mul"))
            or (isinstance(x, Unary) and x.op in ("exp2", "recip")))
        if structured and not ready and not isinstance(x, Const):
            stack.append((x, True))
            stack.extend((c, False) for c in children(x))
            continue
        if not structured:
            k = leaves.setdefault(x, len(leaves))
            mask = 0
            for name in free_vars(x, free):
                if name.startswith(VAR_PREFIX):
                    bit = int(name[len(VAR_PREFIX):])
                    if bit >= MAX_VARS:
                        return None
                    mask |= 1 << bit
            term = f"(VLeaf {k})"
            uses.append(f"(set (Uses {term}) {mask})")
        elif isinstance(x, Const):
            term = f"(VNum {float(x.value)!r})" if _finite(x.value) else None
            if term is None:
                k = leaves.setdefault(x, len(leaves))
                term = f"(VLeaf {k})"
                uses.append(f"(set (Uses {term}) 0)")
        elif isinstance(x, Reduce):
            var = int(x.var.name[len(VAR_PREFIX):])
            if var >= MAX_VARS:
                return None
            n = sizes.setdefault(x.size, len(sizes))
            op = "VSum" if x.op == "sum" else "VMax"
            term = f"({op} {var} {n} {names[id(x.body)]})"
        elif isinstance(x, Binary):
            op = "VAdd" if x.op == "add" else "VMul"
            term = f"({op} {names[id(x.a)]} {names[id(x.b)]})"
        else:
            op = "VExp2" if x.op == "exp2" else "VRecip"
            term = f"({op} {names[id(x.x)]})"
        names[id(x)] = f"$kv{len(lines)}"
        lines.append(f"(let {names[id(x)]} {term})")
    return Encoded("\n".join([*lines, *uses]), names[id(value)], list(leaves), list(sizes))


def _finite(x) -> bool:
    return x == x and abs(float(x)) != float("inf")


def decode(termdag, term: int, encoded: Encoded) -> Value:
    """The extracted `term` as a kernel value."""
    made: dict[int, Value] = {}

    def lit(tid: int):
        return termdag.get(tid).value.value

    def build(tid: int) -> Value:
        got = made.get(tid)
        if got is not None:
            return got
        app = termdag.get(tid)
        args = app.args
        name = app.name
        if name == "VLeaf":
            out = encoded.leaves[lit(args[0])]
        elif name == "VNum":
            out = Const(float(lit(args[0])), float32)
        elif name in ("VAdd", "VMul"):
            out = Binary("add" if name == "VAdd" else "mul", build(args[0]), build(args[1]),
                         float32)
        elif name in ("VExp2", "VRecip"):
            out = Unary("exp2" if name == "VExp2" else "recip", build(args[0]), float32)
        else:
            size = encoded.sizes[lit(args[1])]
            var = _var(lit(args[0]), size)
            if name == "VSoftmaxSum":
                out = SoftmaxSum(var, size, build(args[2]), build(args[3]), float32)
            else:
                out = Reduce("sum" if name == "VSum" else "max", var, size, build(args[2]),
                             float32)
        made[tid] = out
        return out

    return build(term)

