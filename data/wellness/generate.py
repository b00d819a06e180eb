"""Generate the toy wellness data set of notebook 06 (deterministic: fixed seed, fixed dates).

    python data/wellness/generate.py      # rewrites health.csv, sleep.csv, workouts.csv

Three users over 90 days (2025-01-01 .. 2025-03-31). ``wellness_user`` is the reference
agent's user id; they trained more in March than in February, so "this month vs last"
comparisons show a real change. Values are synthetic: plausible, not medical.
"""
from __future__ import annotations

import csv
from datetime import date, timedelta
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SEED = 42
START = date(2025, 1, 1)
DAYS = 90

USERS = {
    # user: baseline resting HR, steps, weight kg, height m, sleep hours, workouts per week, favourites
    "wellness_user": dict(hr=62, steps=8200, weight=78.0, height=1.78, sleep=7.1, per_week=3.5,
                          types=["running", "strength", "cycling", "yoga"]),
    "alex": dict(hr=70, steps=6100, weight=91.0, height=1.83, sleep=6.4, per_week=2.0,
                 types=["walking", "strength", "swimming"]),
    "maya": dict(hr=56, steps=11200, weight=61.0, height=1.66, sleep=7.6, per_week=5.0,
                 types=["running", "hiit", "yoga", "swimming"]),
}

MUSCLES = {"running": ["legs"], "cycling": ["legs"], "walking": ["legs"],
           "strength": ["upper_body", "legs", "core", "full_body"], "yoga": ["core", "full_body"],
           "swimming": ["full_body"], "hiit": ["full_body", "core"]}
MINUTES = {"running": (25, 60), "cycling": (30, 90), "walking": (30, 75), "strength": (30, 70),
           "yoga": (20, 60), "swimming": (25, 55), "hiit": (15, 35)}
KCAL_PER_MIN = {"running": 11, "cycling": 9, "walking": 5, "strength": 7, "yoga": 4,
                "swimming": 10, "hiit": 12}


def generate() -> dict[str, list[dict]]:
    rng = np.random.default_rng(SEED)
    health, sleep, workouts = [], [], []
    for user, p in USERS.items():
        weight = p["weight"]
        for d in range(DAYS):
            day = START + timedelta(days=d)
            march_boost = 1.25 if (user == "wellness_user" and day.month == 3) else 1.0
            weekend = day.weekday() >= 5
            weight += rng.normal(-0.02 * march_boost, 0.15)
            steps = max(1500, int(rng.normal(p["steps"] * march_boost * (1.1 if weekend else 1.0), 1500)))
            hr = round(p["hr"] - (2 if march_boost > 1 else 0) + rng.normal(0, 2.0))
            health.append(dict(user_id=user, date=day.isoformat(), resting_heart_rate=hr, steps=steps,
                               weight_kg=round(weight, 1), bmi=round(weight / p["height"] ** 2, 1)))
            hours = float(np.clip(rng.normal(p["sleep"] + (0.6 if weekend else 0.0), 0.7), 4.0, 10.0))
            bed_minutes = int(rng.normal(23 * 60 + (40 if weekend else 0), 35))
            bedtime = f"{(bed_minutes // 60) % 24:02d}:{bed_minutes % 60:02d}"
            quality = int(np.clip(rng.normal(55 + 5 * (hours - 6), 8), 20, 98))
            sleep.append(dict(user_id=user, date=day.isoformat(), bedtime=bedtime,
                              duration_hours=round(hours, 2), quality_score=quality))
            if rng.random() < p["per_week"] * march_boost / 7:
                kind = str(rng.choice(p["types"]))
                lo, hi = MINUTES[kind]
                minutes = int(rng.integers(lo, hi + 1))
                workouts.append(dict(user_id=user, date=day.isoformat(), type=kind, duration_min=minutes,
                                     muscle_group=str(rng.choice(MUSCLES[kind])),
                                     calories=int(minutes * KCAL_PER_MIN[kind] * rng.uniform(0.85, 1.15))))
    return {"health": health, "sleep": sleep, "workouts": workouts}


def write(tables: dict[str, list[dict]], out: Path = HERE) -> None:
    for name, rows in tables.items():
        with open(out / f"{name}.csv", "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    tables = generate()
    write(tables)
    print({name: len(rows) for name, rows in tables.items()})
