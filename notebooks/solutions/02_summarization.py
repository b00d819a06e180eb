# Notebook 02's exercise: per exercise, the reference solution (`# %% exercise N`), another correct answer
# (`also correct`) and a deliberately wrong one (`wrong`). The wrong variants exist only to test that the
# check rejects a mistake: they are not the answer. tests/test_exercises.py runs each in place of the stub.

# %% exercise 1
class KeepTokens:
    """Summarize when the prompt is over max_tokens; keep verbatim the recent messages that fit in keep_tokens."""

    def __init__(self, max_tokens: int = 600, keep_tokens: int = 200):
        self.max_tokens = max_tokens
        self.keep_tokens = keep_tokens
        self.keep_last = 0

    def triggered(self, prompt, conversation) -> bool:
        used, self.keep_last = 0, 0
        for m in reversed(conversation):          # newest first, while the next one still fits
            used += mk.count_tokens([m])
            if used > self.keep_tokens:
                break
            self.keep_last += 1
        return mk.count_tokens(prompt) > self.max_tokens

# %% exercise 1 also correct
class KeepTokens:
    """keep_last as a property over the conversation seen last: summarize_if_needed reads it right after."""

    def __init__(self, max_tokens: int = 600, keep_tokens: int = 200):
        self.max_tokens, self.keep_tokens, self.seen = max_tokens, keep_tokens, []

    @property
    def keep_last(self):
        fits = [k for k in range(len(self.seen) + 1)
                if mk.count_tokens(self.seen[len(self.seen) - k:]) <= self.keep_tokens]
        return max(fits)

    def triggered(self, prompt, conversation) -> bool:
        self.seen = list(conversation)
        return mk.count_tokens(prompt) > self.max_tokens

# %% exercise 1 wrong
class KeepTokens:
    """Wrong: stops only after the budget is passed, so it keeps one message too many."""

    def __init__(self, max_tokens: int = 600, keep_tokens: int = 200):
        self.max_tokens, self.keep_tokens, self.keep_last = max_tokens, keep_tokens, 0

    def triggered(self, prompt, conversation) -> bool:
        used, self.keep_last = 0, 0
        for m in reversed(conversation):
            used += mk.count_tokens([m])
            self.keep_last += 1
            if used > self.keep_tokens:
                break
        return mk.count_tokens(prompt) > self.max_tokens
