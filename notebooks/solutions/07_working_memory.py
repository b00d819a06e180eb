# Notebook 07's exercise: per exercise, the reference solution (`# %% exercise N`), another correct answer
# (`also correct`) and a deliberately wrong one (`wrong`). The wrong variants exist only to test that the
# check rejects a mistake: they are not the answer. tests/test_exercises.py runs each in place of the stub.

# %% exercise 1
from pydantic import BaseModel, Field

class TripPlan(BaseModel):
    destination: str | None = None
    budget_eur: int | None = Field(None, gt=0)

trip = mk.WorkingMemory(r, NS, schema=TripPlan, scope="conversation")
trip.update({"destination": "Lisbon"}, user_id="ex07", thread_id="trip")
trip.update({"budget_eur": 800}, user_id="ex07", thread_id="trip")
print(trip.key("ex07", "trip"), "->", r.get(trip.key("ex07", "trip")))

# %% exercise 1 also correct
from typing import Annotated, Optional
from pydantic import BaseModel, Field

class TripPlan(BaseModel):
    destination: Optional[str] = None
    budget_eur: Optional[Annotated[int, Field(ge=1)]] = None

trip = mk.WorkingMemory(r, NS, schema=TripPlan)    # conversation is the default scope
trip.update({"destination": "Lisbon", "budget_eur": 800}, user_id="ex07", thread_id="trip")

# %% exercise 1 wrong
from pydantic import BaseModel

class TripPlan(BaseModel):
    destination: str | None = None
    budget_eur: int | None = None                  # no rule: a negative budget gets through

trip = mk.WorkingMemory(r, NS, schema=TripPlan, scope="conversation")
trip.update({"destination": "Lisbon", "budget_eur": 800}, user_id="ex07", thread_id="trip")
