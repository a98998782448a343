"""The shared check of the refusal tests: a call raises AttnkitError naming
the expected catalogued code, with at least one fix."""
import pytest

import attnkit


def expect_refused(code, call, *args, **kwargs):
    with pytest.raises(attnkit.AttnkitError) as e:
        call(*args, **kwargs)
    assert code in [d["code"] for d in e.value.diagnostics], str(e.value)
    assert e.value.solutions
    return e.value
