# Reference solutions for notebook 05's exercises (tests/test_exercises.py runs them in place of the stubs).

# %% exercise 1
store.forget_user("exercise")                      # start clean on every run
prediction = "UPDATE"
store.remember("User prefers tea.", user_id="exercise", llm=llm)
decision = store.remember("I switched to coffee.", user_id="exercise", llm=llm)

# %% exercise 2
def supersede(pipe, old_key, new_key, new_content, now):
    """Close the memory at old_key and write its replacement, unless another writer closed it first."""
    old = pipe.json().get(old_key)                 # after WATCH: runs at once
    if old is None or old["invalid_at"] is not None:
        return "STALE"
    pipe.multi()                                   # from here on: queued until EXEC
    pipe.json().set(new_key, "$", {"content": new_content, "invalid_at": None,
                                   "superseded_by": None, "supersedes": old_key})
    pipe.json().set(old_key, "$.invalid_at", now)
    pipe.json().set(old_key, "$.superseded_by", new_key)
    return "UPDATE"
