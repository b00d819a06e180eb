# Notebook 05's exercises: per exercise, the reference solution (`# %% exercise N`), another correct answer
# (`also correct`) and a deliberately wrong one (`wrong`). The wrong variants exist only to test that the
# check rejects a mistake: they are not the answer. tests/test_exercises.py runs each in place of the stub.

# %% exercise 1
store.forget_user("exercise")                      # start clean on every run
prediction = "UPDATE"
store.remember("User prefers tea.", user_id="exercise", llm=llm)
decision = store.remember("I switched to coffee.", user_id="exercise", llm=llm)

# %% exercise 1 also correct
store.forget_user("exercise")
prediction = "invalidate"                          # the tea preference stopped being true: also right
store.remember("User prefers tea.", user_id="exercise", llm=llm)
decision = store.remember("User switched to coffee.", user_id="exercise", llm=llm)

# %% exercise 1 wrong
store.forget_user("exercise")
prediction = "ADD"                                 # would keep tea and coffee both current
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

# %% exercise 2 also correct
def supersede(pipe, old_key, new_key, new_content, now):
    """Read only the field that matters, then rewrite the whole old document in the transaction."""
    closed = pipe.json().get(old_key, "$.invalid_at")   # a JSONPath read: [value]
    if closed and closed[0] is not None:
        return "STALE"
    old = pipe.json().get(old_key)
    pipe.multi()
    pipe.json().set(old_key, "$", {**old, "invalid_at": now, "superseded_by": new_key})
    pipe.json().set(new_key, "$", dict(content=new_content, invalid_at=None, superseded_by=None, supersedes=old_key))
    return "UPDATE"

# %% exercise 2 wrong
def supersede(pipe, old_key, new_key, new_content, now):
    """Forgets to check whether another writer closed the old memory first."""
    pipe.multi()
    pipe.json().set(new_key, "$", {"content": new_content, "invalid_at": None,
                                   "superseded_by": None, "supersedes": old_key})
    pipe.json().set(old_key, "$.invalid_at", now)
    pipe.json().set(old_key, "$.superseded_by", new_key)
    return "UPDATE"
