# Notebook 03's exercise: per exercise, the reference solution (`# %% exercise N`), another correct answer
# (`also correct`) and a deliberately wrong one (`wrong`). The wrong variants exist only to test that the
# check rejects a mistake: they are not the answer. tests/test_exercises.py runs each in place of the stub.

# %% exercise 1
def nearest(question, user_id, topic, k=3, max_distance=None):
    """(content, distance) of user_id's memories about topic, closest first."""
    scope = (Tag("user_id") == user_id) & (Tag("topic") == topic)
    vector = emb.embed(question)
    if max_distance is None:
        q = VectorQuery(vector, "embedding", return_fields=["content"], num_results=k,
                        filter_expression=scope)
    else:
        q = VectorRangeQuery(vector, "embedding", return_fields=["content"], num_results=k,
                             distance_threshold=max_distance, filter_expression=scope)
    rows_found = sorted(index.query(q), key=lambda row: float(row["vector_distance"]))
    return [(row["content"], float(row["vector_distance"])) for row in rows_found]

# %% exercise 1 also correct
def nearest(question, user_id, topic, k=3, max_distance=None):
    """The same search typed as FT.SEARCH, with the distance limit applied to the KNN results."""
    blob = np.array(emb.embed(question), dtype=np.float32).tobytes()
    scope = f"(@user_id:{{{user_id}}} @topic:{{{topic}}})"
    reply = r.execute_command(
        "FT.SEARCH", "nb03_memories", f"{scope}=>[KNN {k} @embedding $vec AS vector_distance]",
        "PARAMS", 2, "vec", blob, "RETURN", 2, "content", "vector_distance",
        "SORTBY", "vector_distance", "LIMIT", 0, k, "DIALECT", 2)
    found = [(d["extra_attributes"]["content"], float(d["extra_attributes"]["vector_distance"]))
             for d in reply["results"]]
    return tuple(pair for pair in found if max_distance is None or pair[1] <= max_distance)

# %% exercise 1 wrong
def nearest(question, user_id, topic, k=3, max_distance=None):
    """Wrong: filters by user only, so other topics' memories come back too."""
    q = VectorQuery(emb.embed(question), "embedding", return_fields=["content"], num_results=k,
                    filter_expression=Tag("user_id") == user_id)
    return [(row["content"], float(row["vector_distance"])) for row in index.query(q)
            if max_distance is None or float(row["vector_distance"]) <= max_distance]
