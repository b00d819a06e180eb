"""docker-compose.yml and environment.yml parse and name what the README promises."""
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_compose_services():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    redis_image = services["redis"]["image"]
    assert redis_image.startswith(("redis:8", "redis/redis-stack"))
    assert "redisinsight" in services["redisinsight"]["image"]
    assert any("5540" in str(p) for p in services["redisinsight"]["ports"])
    jupyter = services["jupyter"]
    env = jupyter["environment"]
    env = dict(e.split("=", 1) for e in env) if isinstance(env, list) else env
    assert env["REDIS_URL"].startswith("redis://redis:6379")
    assert "redis" in jupyter["depends_on"]


def test_environment_yml_pins_python_and_installs_project():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    assert any(p.startswith("torch==") for p in pip) and any(p.startswith("-e .") for p in pip)
