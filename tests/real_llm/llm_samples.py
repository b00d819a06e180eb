"""Every Task the library declares, and a small valid input for each (for the real-model suite)."""
from __future__ import annotations

import enum
import importlib
import pkgutil
import types
import typing
from dataclasses import is_dataclass

from pydantic import BaseModel

from memorykit.llm.task import Task
from memorykit.messages import Message

DOMAIN_PACKAGES = ("memorykit.memory", "memorykit.agent", "memorykit.course")


IMPORT_ERRORS: dict[str, str] = {}
"""Domain modules that failed to import during discovery (a test reports them)."""


def library_tasks() -> dict[str, Task]:
    """Every module-level :class:`Task` declared in the memory, agent and course packages, by name."""
    found: dict[int, tuple[str, Task]] = {}
    for package_name in DOMAIN_PACKAGES:
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__, prefix=f"{package_name}."):
            if package_name == "memorykit.course" and info.name.endswith((".widgets", ".plots")):
                continue  # heavy UI modules declare no tasks
            try:
                module = importlib.import_module(info.name)
            except Exception as exc:  # reported by test_every_domain_module_imports
                IMPORT_ERRORS[info.name] = f"{type(exc).__name__}: {exc}"
                continue
            for value in vars(module).values():
                if isinstance(value, Task) and getattr(value.input, "__module__", "").startswith("memorykit"):
                    found.setdefault(id(value), (info.name, value))
    names = [task.name for _, task in found.values()]
    return {(task.name if names.count(task.name) == 1 else f"{task.name}@{module}"): task
            for module, task in found.values()}


CONVERSATION = [
    Message(role="user", content="Hi, I'm Lena. I moved from Paris to Berlin last month."),
    Message(role="assistant", content="Welcome to Berlin, Lena! How is it going?"),
    Message(role="user", content="Great. I'm allergic to peanuts and I started learning German."),
]
TEXT_BY_NAME = {
    "query": "Where do I live now?", "question": "Where do I live now?", "text": "I moved to Berlin last month.",
    "content": "User lives in Berlin", "new": "User moved to Berlin in March 2024",
    "candidate": "User moved to Berlin in March 2024", "memory": "User lives in Paris",
    "existing": "User lives in Paris", "user_id": "lena", "thread_id": "t1",
    "response": "You live in Berlin.", "reply": "You live in Berlin.", "assistant": "You live in Berlin.",
    "label": "positive", "feedback": "positive", "template": "# Profile\n- Name:\n- City:\n",
    "current": "# Profile\n- Name:\n- City: Paris\n", "description": "a Markdown profile of the user",
    "limit": "at most 500 characters", "format": "template", "summary": "User is called Lena.",
}


def _strip(annotation):
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _strip(typing.get_args(annotation)[0])
    return annotation


def sample_value(name: str, annotation, depth: int = 0):
    """A plausible value for one field, from its type and (for strings) its name."""
    annotation = _strip(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return sample_value(name, options[0], depth) if options else None
    if origin is typing.Literal:
        return args[0]
    if origin in (list, tuple, set, typing.Sequence) or annotation in (list, tuple):
        item = args[0] if args else str
        if name == "steps":
            return []
        if _strip(item) is Message:
            return list(CONVERSATION)
        if isinstance(_strip(item), type) and issubclass(_strip(item), BaseModel) and \
                {"role", "content"} <= set(_strip(item).model_fields):
            return [_strip(item).model_validate({"role": m.role, "content": m.content}) for m in CONVERSATION]
        if name in ("messages", "texts") and _strip(item) is str:
            return [m.content for m in CONVERSATION if m.role == "user"]
        return [sample_value(name.rstrip("s"), item, depth + 1)]
    if origin is dict or annotation is dict:
        return {}
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return next(iter(annotation))
        if issubclass(annotation, BaseModel):
            return sample_model(annotation, depth + 1)
        if annotation is Message or is_dataclass(annotation):
            return CONVERSATION[-1]
        if annotation is bool:
            return False
        if annotation is int:
            return 3
        if annotation is float:
            return 0.5
        if annotation is str:
            return TEXT_BY_NAME.get(name, "I moved from Paris to Berlin last month.")
    return TEXT_BY_NAME.get(name, "I moved from Paris to Berlin last month.")


def sample_model(model: type[BaseModel], depth: int = 0) -> BaseModel:
    """A small valid instance of a task's input model (fields with defaults keep them)."""
    data = {}
    for name, field in model.model_fields.items():
        if not field.is_required() and depth > 0:
            continue
        if not field.is_required() and name not in ("messages", "steps", "candidates", "existing"):
            continue
        data[name] = sample_value(name, field.annotation, depth)
    return model.model_validate(data)


SPECIAL_INPUTS: dict[str, typing.Callable[[Task], BaseModel]] = {}
"""Task name -> builder, for an input the generic sampler cannot guess (filled in as tasks appear)."""


def sample_input(task: Task) -> BaseModel:
    builder = SPECIAL_INPUTS.get(task.name)
    return builder(task) if builder else sample_model(task.input)


def _working_input(task: Task) -> BaseModel:
    return task.input.model_validate({
        "format": "template", "description": "a Markdown profile: name, city, goals",
        "template": "# Profile\n- Name:\n- City:\n- Goals:\n", "current": "# Profile\n- Name:\n- City: Paris\n- Goals:\n",
        "messages": ["Call me Lena. I live in Berlin now."], "limit": "at most 500 characters"})


SPECIAL_INPUTS["update_working_memory"] = _working_input
SPECIAL_INPUTS["decide_memory"] = lambda task: task.input.model_validate({
    "new": "User moved to Berlin in March 2024",
    "existing": [{"id": 0, "fact": "User lives in Paris"}, {"id": 1, "fact": "User is allergic to peanuts"}]})
SPECIAL_INPUTS["analyze_feedback"] = lambda task: task.input.model_validate({"exchanges": [
    {"user": "Suggest a dinner for tonight.", "assistant": "Try a Thai peanut noodle salad."},
    {"user": "No, I told you I'm allergic to peanuts! Never suggest peanuts."}]})
SPECIAL_INPUTS["reply"] = lambda task: task.input.model_validate({
    "question": "Where do I live now?", "history": CONVERSATION[:2],
    "memories": ["User moved from Paris to Berlin last month", "User is allergic to peanuts"]})
