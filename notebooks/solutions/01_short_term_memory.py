# Notebook 01's exercise: per exercise, the reference solution (`# %% exercise N`), another correct answer
# (`also correct`) and a deliberately wrong one (`wrong`). The wrong variants exist only to test that the
# check rejects a mistake: they are not the answer. tests/test_exercises.py runs each in place of the stub.

# %% exercise 1
def keep_last(messages, n):
    """The opening system messages + the longest valid window of at most n recent messages."""
    head = 0
    while head < len(messages) and messages[head].role == "system":
        head += 1
    start = max(head, len(messages) - n)
    # A tool result always follows its call with no user message in between, so a window that
    # starts on a user message never splits a tool call from its results.
    while start < len(messages) and messages[start].role != "user":
        start += 1
    return list(messages[:head]) + list(messages[start:])

# %% exercise 1 also correct
def keep_last(messages, n):
    """Every user message near enough the end is a valid start; take the earliest one, as a tuple."""
    head = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
    starts = [i for i in range(head, len(messages)) if messages[i].role == "user" and len(messages) - i <= n]
    return tuple(messages[:head]) + tuple(messages[starts[0]:] if starts else ())

# %% exercise 1 wrong
def keep_last(messages, n):
    """Wrong: a plain slice of the last n messages may start with a tool result or an assistant reply."""
    head = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
    return list(messages[:head]) + list(messages[max(head, len(messages) - n):])
