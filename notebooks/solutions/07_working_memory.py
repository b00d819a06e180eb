# Reference solution for notebook 07's exercise (tests/test_exercises.py runs it in place of the stub).

# %% exercise 1
from pydantic import BaseModel, Field

class TripPlan(BaseModel):
    destination: str | None = None
    budget_eur: int | None = Field(None, gt=0)

trip = mk.WorkingMemory(r, NS, schema=TripPlan, scope="conversation")
trip.update({"destination": "Lisbon"}, user_id="ex07", thread_id="trip")
trip.update({"budget_eur": 800}, user_id="ex07", thread_id="trip")
print(trip.key("ex07", "trip"), "->", r.get(trip.key("ex07", "trip")))
