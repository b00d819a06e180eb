# Reference solution for notebook 00's exercise (tests/test_exercises.py runs it in place of the stub).

# %% exercise 1
def build_messages(earlier, text):
    """The messages for one call: every earlier message, in order, then `text` as a new user message."""
    return [*earlier, mk.Message(role="user", content=text)]

my_fact = "I play the cello in an orchestra."
my_question = "Which instrument do I play?"
