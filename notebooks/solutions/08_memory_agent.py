# Reference solution for notebook 08's exercise (tests/test_exercises.py runs it in place of the stub).

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
