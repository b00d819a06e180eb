# Notebook 04's exercise: per exercise, the reference solution (`# %% exercise N`), another correct answer
# (`also correct`) and a deliberately wrong one (`wrong`). The wrong variants exist only to test that the
# check rejects a mistake: they are not the answer. tests/test_exercises.py runs each in place of the stub.

# %% exercise 1
def memories_for(question, user_id):
    """The memory texts to inject: those near the question, plus every health memory, each once."""
    vector = emb.embed(question)  # embedded once, for both searches
    near = store.search(question, user_id=user_id, k=10, distance_threshold=threshold, vector=vector)
    health = store.search(question, user_id=user_id, k=100, topics=["health"], vector=vector)
    found = {}
    for hit in sorted(near + health, key=lambda h: h.distance):  # nearest first, each memory once
        found.setdefault(hit.memory.id, hit.memory.content)
    return list(found.values())

# %% exercise 1 also correct
def memories_for(question, user_id):
    texts = [h.memory.content for h in store.search(question, user_id=user_id, k=10, distance_threshold=threshold)]
    texts += [m.content for m in store.list(user_id) if "health" in m.topics]
    return tuple(dict.fromkeys(texts))

# %% exercise 1 wrong
def memories_for(question, user_id):
    # only what is near the question: the allergy is missed when the question is about something else
    return [h.memory.content for h in store.search(question, user_id=user_id, k=10, distance_threshold=threshold)]
