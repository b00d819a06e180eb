# Reference solution for notebook 06's exercise (tests/test_exercises.py runs it in place of the stub).

# %% exercise 1
my_question = "Is my sleep in line with my goals?"
my_paraphrase = "Am I sleeping as much as I wanted to?"

mine = cold_agent.run(my_question, user_id=USER)
if mine.evaluation.success_score >= 0.7:
    procs.store(mine.query, mine.tools_used, mine.evaluation.success_score, mine.execution_time_ms,
                user_id=USER)
followed = warm_agent.run(my_paraphrase, user_id=USER)
