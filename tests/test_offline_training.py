"""How the offline models train: the same features, computed in blocks instead of one word at a time."""
import numpy as np

from memorykit.offline import working_models as wm


def test_context_similarity_of_training_words_leaves_their_own_message_out(monkeypatch):
    """add_contexts (blocks of rows) gives each word what context_similarity gives it against the
    contexts of every *other* message: the per-word definition, checked on random unit vectors."""
    rng = np.random.default_rng(7)
    counts = [3, 1, 4, 2, 5, 1, 2]                       # words per message
    name_ctx = [[f"m{m} w{k}" for k in range(c)] for m, c in enumerate(counts)]
    name_y = [[int(m in (0, 2) and k < 2) for k in range(c)] for m, c in enumerate(counts)]
    texts = [t for ctxs in name_ctx for t in ctxs]
    vecs = rng.normal(size=(len(texts), 384)).astype(np.float32)
    table = dict(zip(texts, vecs))
    monkeypatch.setattr(wm, "embed_many", lambda ts: np.stack([table[t] for t in ts]))
    name_x = [[{"bias": 1.0} for _ in range(c)] for c in counts]
    wm.add_contexts(name_x, name_y, name_ctx, chunk=4)   # several blocks, one of them partial
    unit = {t: v / (np.linalg.norm(v) + 1e-9) for t, v in table.items()}
    for m, ctxs in enumerate(name_ctx):
        for k, text in enumerate(ctxs):
            others = [(t, y) for o, (cs, ys) in enumerate(zip(name_ctx, name_y)) if o != m for t, y in zip(cs, ys)]
            pos = np.stack([unit[t] for t, y in others if y == 1])
            neg = np.stack([unit[t] for t, y in others if y == 0])
            want = float(wm.context_similarity(unit[text][None, :], pos, neg)[0]) * 10
            assert abs(name_x[m][k]["ctx"] - want) < 1e-5
            assert name_x[m][k]["bias"] == 1.0
