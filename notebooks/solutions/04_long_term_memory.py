# Reference solution for notebook 04's exercise (tests/test_exercises.py runs it in place of the stub).

# %% exercise 1
maya_food = owner_filter("maya") & (Tag("memory_type") == "episodic") & (Tag("topics") == "food")
