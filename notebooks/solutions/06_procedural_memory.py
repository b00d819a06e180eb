# Notebook 06's exercise: per exercise, the reference solution (`# %% exercise N`), another correct answer
# (`also correct`) and a deliberately wrong one (`wrong`). The wrong variants exist only to test that the
# check rejects a mistake: they are not the answer. tests/test_exercises.py runs each in place of the stub.

# %% exercise 1 also correct
for p in procs.list(USER):                          # start clean on every run
    procs.delete(p.id, user_id=USER)
target = "Is evening yoga helping my sleep quality?"
teaching = "How does my sleep quality compare on days I do yoga?"
taught = cold_agent.run(teaching, user_id=USER)
if taught.evaluation.success_score >= 0.7:
    procs.store(taught.query, taught.tools_used, taught.evaluation.success_score, taught.execution_time_ms,
                user_id=USER, calls=taught.calls)
fixed = warm_agent.run(target, user_id=USER)

# %% exercise 1 wrong
for p in procs.list(USER):                          # start clean on every run
    procs.delete(p.id, user_id=USER)
target = "Is evening yoga helping my sleep quality?"
teaching = target                                  # the target's own cold run has the wrong tools
taught = cold_agent.run(teaching, user_id=USER)
if taught.evaluation.success_score >= 0.7:
    procs.store(taught.query, taught.tools_used, taught.evaluation.success_score, taught.execution_time_ms,
                user_id=USER)
fixed = warm_agent.run(target, user_id=USER)

# %% exercise 1
for p in procs.list(USER):                          # start clean on every run
    procs.delete(p.id, user_id=USER)
target = "Is evening yoga helping my sleep quality?"
print("cold:", cold_agent.run(target, user_id=USER).tools_used)

teaching = "Does yoga improve my sleep?"
taught = cold_agent.run(teaching, user_id=USER)
print("your question, cold:", taught.tools_used, "| score:", taught.evaluation.success_score)
if taught.evaluation.success_score >= 0.7:
    procs.store(taught.query, taught.tools_used, taught.evaluation.success_score, taught.execution_time_ms,
                user_id=USER)
fixed = warm_agent.run(target, user_id=USER)
