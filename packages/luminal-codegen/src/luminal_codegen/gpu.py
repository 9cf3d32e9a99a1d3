"""The shape of a GPU kernel shared by every GPU dialect: one thread per point of the domain,
its loop variables decoded from a flat global id. A GPU backend subclasses `GpuDialect` and
sets the names of its language (luminal-cuda: CUDA C, luminal-rocm: OpenCL C)."""

from __future__ import annotations

from .render import Dialect


def unravel_declarations(flat: str, extents: list[str], names: list[str]) -> list[str]:
    """Declarations of `names` from row-major position `flat` in `extents`."""
    lines, stride = [], ""
    for k in range(len(names) - 1, -1, -1):
        q = f"({flat} / ({stride}))" if stride else flat
        lines.append(f"const long {names[k]} = {q if k == 0 else f'{q} % ({extents[k]})'};")
        stride = f"{stride} * ({extents[k]})" if stride else f"({extents[k]})"
    return lines[::-1]


class GpuDialect(Dialect):
    """One thread per domain point, from a flat global id. A GPU language sets `global_id`
    (the expression of a thread's flat index), `kernel_qualifier` and `buffer_qualifier`."""

    global_id = ""
    kernel_qualifier = ""
    buffer_qualifier = ""
    # the expression of the number of threads launched; a dialect that sets it may make each
    # thread compute `points` points (`points` above 1, launched with that many times fewer
    # threads): its own, then the one as many threads on, and so on
    global_count = ""
    points = 1

    def domain(self, extents, names, body, simd_last=False):
        total = " * ".join(f"({e})" for e in extents) or "1"
        extents, names = self.ordered(extents, names)
        if self.points > 1:
            return [
                f"for (long lm_q = 0; lm_q < {self.points}; lm_q++) {{",
                f"  const long lm_gid = {self.global_id} + lm_q * {self.global_count};",
                f"  if (lm_gid >= {total}) break;",
                *("  " + x for x in [*unravel_declarations("lm_gid", extents, names), *body]),
                "}",
            ]
        return [
            f"const long lm_gid = {self.global_id};",
            f"if (lm_gid >= {total}) return;",
            *unravel_declarations("lm_gid", extents, names),
            *body,
        ]

    def signature(self, name, params, dims, attributes=""):
        args = [
            f"{self.buffer_qualifier}{'' if out else 'const '}{t} *{self.restrict} {n}"
            for t, n, out in params
        ] + [f"long {d}" for d in dims]
        return f"{self.qualifiers(attributes)} void {name}({', '.join(args)})"
