# Reference solution for notebook 09's exercise (tests/test_exercises.py runs it in place of the stub).

# %% exercise 1
def weighted_rrf(rankings, weights, k=60):
    """Ids ordered by weighted reciprocal rank fusion, best first."""
    scores = {}
    for name, ids in rankings.items():
        w = weights.get(name, 1.0)
        for rank, doc in enumerate(ids, 1):
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank)
    return sorted(scores, key=lambda d: (-scores[d], d))
