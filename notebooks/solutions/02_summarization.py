# Reference solution for notebook 02's exercise (tests/test_exercises.py runs it in place of the stub).

# %% exercise 1
class ByChars:
    """Summarize when the prompt's text is longer than max_chars characters; keep the last keep_last."""

    def __init__(self, max_chars: int = 2000, keep_last: int = 6):
        self.max_chars = max_chars
        self.keep_last = keep_last

    def triggered(self, prompt, conversation) -> bool:
        return sum(len(m.content) for m in prompt) > self.max_chars
