"""Reductions split over a group of threads (a CUDA block, a Metal threadgroup).

The core renderer writes each reduction as a loop inside one thread. When a kernel's domain is
small and its reductions long, a GPU backend renders the reductions at the top of the body
cooperatively instead: the group's threads stride through the steps together, each folding its
share into a partial result, and the group then combines the partials. `CooperativeWriter` does
the striding and the per-dtype accumulators (with the semantics of the core renderer's loops:
integer sums wrap, float max propagates NaN); a backend says how its threads stride
(`lane_loop`) and how a group combines values (`combine`). Nested reductions stay per thread.
"""

from __future__ import annotations

from .ir import Reduce
from .render import BodyWriter, Scope


class CooperativeWriter(BodyWriter):
    """A `BodyWriter` whose root-scope reductions run over the thread group."""

    unsigned = "unsigned int"  # the C type integer sums wrap in

    def lane_loop(self, var: str, size: str) -> str:
        """The opening line of the loop through which the group's threads stride over
        `var` in [0, size) together."""
        raise NotImplementedError

    def combine(self, op: str, ctype: str, value: str) -> str:
        """An expression: `value` of every thread of the group combined by `op` ("or", "sum"
        or "max") as the C type `ctype` ("int", "float" or `unsigned`)."""
        raise NotImplementedError

    def reduce(self, r: Reduce, scope: Scope) -> str:
        if scope.depth != 0:
            return super().reduce(r, scope)
        acc = self.fresh()
        inner = Scope(1)
        self.scope_of[r.var.name] = inner
        body = self.emit(r.body)
        var, size = self.names.get(r.var.name, r.var.name), self.expr(r.size)
        pre, update, post = self.accumulate(r, acc, body)
        scope.lines.extend(pre)
        scope.lines.append(self.lane_loop(var, size))
        scope.lines.extend("  " + line for line in [*inner.lines, update])
        scope.lines.append("}")
        scope.lines.extend(post)
        if r.dtype.is_float and r.dtype.name != "float32":
            rounded = self.fresh()
            scope.lines.append(f"float {rounded} = {self.d.round(r.dtype, acc)};")
            return rounded
        return acc

    def accumulate(self, r: Reduce, acc: str, body: str) -> tuple[list[str], str, list[str]]:
        """(declarations, loop update, group combine) of reduction `r` into `acc`."""
        if r.dtype.name == "bool":
            return ([f"int {acc} = 0;"], f"{acc} |= {body};",
                    [f"{acc} = {self.combine('or', 'int', acc)};"])
        if r.op == "sum" and not r.dtype.is_float:
            u = self.unsigned
            return ([f"{u} {acc}_u = 0u;"], f"{acc}_u += ({u}){body};",
                    [f"int {acc} = (int){self.combine('sum', u, f'{acc}_u')};"])
        if r.op == "sum":
            return ([f"float {acc} = 0.0f;"], f"{acc} += {body};",
                    [f"{acc} = {self.combine('sum', 'float', acc)};"])
        if not r.dtype.is_float:
            return ([f"int {acc} = (int)0x80000000u;"],
                    f"{acc} = {body} > {acc} ? {body} : {acc};",
                    [f"{acc} = {self.combine('max', 'int', acc)};"])
        return (
            [f"float {acc} = -INFINITY; int {acc}_nan = 0;"],
            f"{acc} = {body} > {acc} ? {body} : {acc}; {acc}_nan |= {body} != {body};",
            [f"{acc} = {self.combine('max', 'float', acc)};",
             f"if ({self.combine('or', 'int', f'{acc}_nan')}) {acc} = NAN;"],
        )
