# Notebook 09's exercise: per exercise, the reference solution (`# %% exercise N`), another correct answer
# (`also correct`) and a deliberately wrong one (`wrong`). The wrong variants exist only to test that the
# check rejects a mistake: they are not the answer. tests/test_exercises.py runs each in place of the stub.

# %% exercise 1
def as_of_filter(t, types):
    """A VSIM FILTER expression: elements of one of `types` that were true at time `t`."""
    # true at t: it had started (valid_from <= t) and had not yet stopped (still true, or stops after t)
    return f".type in {json.dumps(list(types))} and .valid_from <= {t} and (.invalid_at == 0 or .invalid_at > {t})"

# %% exercise 1 also correct
def as_of_filter(t, types):
    kinds = " or ".join(f'.type == "{k}"' for k in types)
    return f"({kinds}) and not (.valid_from > {t}) and (.invalid_at == 0 or not (.invalid_at <= {t}))"

# %% exercise 1 wrong
def as_of_filter(t, types):  # keeps a fact that stopped exactly at t
    return f".type in {json.dumps(types)} and .valid_from <= {t} and (.invalid_at == 0 or .invalid_at >= {t})"
