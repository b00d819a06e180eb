# Notebook 00's exercise: per exercise, the reference solution (`# %% exercise N`), another correct answer
# (`also correct`) and a deliberately wrong one (`wrong`). The wrong variants exist only to test that the
# check rejects a mistake: they are not the answer. tests/test_exercises.py runs each in place of the stub.

# %% exercise 1
def build_messages(earlier, text):
    """The messages for one call: every earlier message, in order, then `text` as a new user message."""
    return [*earlier, mk.Message(role="user", content=text)]

my_fact = "I play the cello in an orchestra."
my_question = "Which instrument do I play?"

# %% exercise 1 also correct
def build_messages(earlier, text):
    """A tuple is as good as a list: the chat call only iterates over the messages."""
    return (*earlier, mk.Message(role="user", content=text))

my_fact = "My dog is called Pixel."
my_question = "What is the name of my dog?"

# %% exercise 1 wrong
def build_messages(earlier, text):
    """Wrong: the new message goes first, so the model reads the turns out of order."""
    return [mk.Message(role="user", content=text), *earlier]

my_fact = "I play the cello in an orchestra."
my_question = "Which instrument do I play?"
