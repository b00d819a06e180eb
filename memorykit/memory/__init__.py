"""The memory layers: short-term threads, summaries, long-term memories, dedup, procedures, working memory, recall."""
