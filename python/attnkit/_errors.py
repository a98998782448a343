"""The exception every attnkit failure raises: it carries the catalogued diagnostics."""


class AttnkitError(ValueError):
    """An attnkit refusal or failure.

    Attributes:
        diagnostics: list of dicts with code, severity, message, meaning, solutions, example.
        code: the first error's code (e.g. "AK1002"); `attnkit.explain(code)` prints its page.
        solutions: the first error's suggested fixes.
    """

    def __init__(self, diagnostics):
        self.diagnostics = list(diagnostics)
        errors = [d for d in self.diagnostics if d.get("severity") == "error"] or self.diagnostics
        first = errors[0] if errors else {"code": "AK0000", "message": "unknown failure", "solutions": []}
        self.code = first["code"]
        self.solutions = list(first.get("solutions", []))
        lines = []
        for d in self.diagnostics:
            lines.append(f"{d['code']}: {d['message']}")
            lines.extend(f"  fix: {s}" for s in d.get("solutions", []))
        super().__init__("\n".join(lines))
