# Reference solution for notebook 05's exercise (tests/test_exercises.py runs it in place of the stub).

# %% exercise 1
prediction = "UPDATE"
store.remember("User prefers tea.", user_id="exercise", llm=llm)
decision = store.remember("I switched to coffee.", user_id="exercise", llm=llm)
