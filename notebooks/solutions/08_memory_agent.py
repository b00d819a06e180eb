# Notebook 08's exercise: per exercise, the reference solution (`# %% exercise N`), another correct answer
# (`also correct`) and a deliberately wrong one (`wrong`). The wrong variants exist only to test that the
# check rejects a mistake: they are not the answer. tests/test_exercises.py runs each in place of the stub.

# %% exercise 1
import dataclasses

HEALTH_WORDS = re.compile(r"allerg|peanut|insulin|diabet|medic|illness|disease|diagnos", re.IGNORECASE)

def no_health(prompt):
    """Return the prompt with every health detail removed from the system message."""
    out = []
    for m in prompt:
        if m.role == "system":
            kept = [line for line in m.content.splitlines() if not HEALTH_WORDS.search(line)]
            m = dataclasses.replace(m, content="\n".join(kept))
        out.append(m)
    return out

# %% exercise 1 also correct
def no_health(prompt):
    words = ("allergy", "allergic", "peanut", "insulin", "diabetes")
    def clean(text):
        return "\n".join(line for line in text.split("\n") if not any(w in line.lower() for w in words))
    return [mk.Message(role=m.role, content=clean(m.content)) if m.role == "system" else m for m in prompt]

# %% exercise 1 wrong
def no_health(prompt):
    # cleans every message, so the user's own question ("What am I allergic to?") is emptied too
    words = ("allerg", "peanut", "insulin", "diabet")
    return [mk.Message(role=m.role, content="\n".join(line for line in m.content.splitlines()
                                                      if not any(w in line.lower() for w in words)))
            for m in prompt]
