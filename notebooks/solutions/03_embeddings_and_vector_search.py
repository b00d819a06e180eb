# Reference solution for notebook 03's exercise (tests/test_exercises.py runs it in place of the stub).

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
