"""Long-term memory as tools: ``search_memory`` and ``manage_memory``, bound to one user."""
from __future__ import annotations

import json
from typing import Any

from ..config import settings
from ..errors import ValidationError
from ..keys import check_id
from ..llm.tools import Tool, ToolError
from ..memory.index import memory_type_list
from ..memory.long_term import MemoryHit


def memory_tools(store, user_id: str, *, llm=None) -> list[Tool]:
    """``search_memory`` and ``manage_memory`` bound to one user (never taken from the model, so a
    call cannot reach another user's memories); writes go through ``store.remember`` (no duplicates)."""
    check_id(user_id, "user_id")

    def search_memory(query: str, memory_type: str = "any", limit: int = 5) -> dict[str, Any]:
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty string")
        hits = store.search(query, user_id=user_id, k=max(1, min(int(limit), 20)),
                            memory_types=memory_type_list(None if memory_type in ("", "any") else memory_type),
                            distance_threshold=settings().distance_threshold)
        return {"results": [{"id": h.memory.id, "memory_type": h.memory.memory_type,
                             "content": h.memory.content, "distance": round(h.distance, 3)} for h in hits]}

    def manage_memory(action: str, content: str | None = None, memory_type: str = "episodic",
                      memory_id: str | None = None) -> dict[str, Any]:
        action = str(action).strip().lower()
        if action not in ("add", "update", "delete"):
            raise ToolError(f"action must be 'add', 'update' or 'delete', got {action!r}")
        if action != "delete" and (not isinstance(content, str) or not content.strip()):
            raise ToolError(f"{action} needs the memory's content")
        if action == "add":
            mtype = memory_type_list(memory_type)[0]
            if mtype not in ("episodic", "semantic"):
                raise ToolError("memory_type must be 'episodic' or 'semantic'")
            decision = store.remember(content, user_id=user_id, memory_type=mtype, llm=llm)
            memory = decision.memory if decision.memory and decision.memory.user_id == user_id else None
            return {"status": "stored" if decision.action != "NOOP" else "already known",
                    "action": decision.action.lower(), "id": memory.id if memory else None,
                    "content": memory.content if memory else content}
        memory = store.get(memory_id, user_id) if isinstance(memory_id, str) and memory_id.strip() else None
        if memory is not None and memory.shared:  # readable by everyone, changed only by the app's shared API
            raise ToolError(f"memory {memory_id!r} is shared knowledge and cannot be changed from a chat; "
                            "add a memory of the user's own instead")
        if memory is None:  # the store answers "not yours" exactly like "absent"
            raise ToolError(f"no memory with id {memory_id!r} for this user; search_memory lists ids")
        try:
            if action == "update":  # a new version; the old one stays as history (as_of, history())
                decision = store.revise(memory.id, content, user_id=user_id)
                return {"status": "updated" if decision.action == "UPDATE" else "already known",
                        "id": decision.memory.id, "replaces": memory.id if decision.action == "UPDATE" else None,
                        "content": decision.memory.content}
            if not store.delete(memory.id, user_id=user_id):
                raise ValidationError(f"no memory with id {memory_id!r}")
        except ValidationError as exc:  # deleted meanwhile, or bad content: the model can correct itself
            raise ToolError(f"{exc}; search_memory lists ids") from exc
        return {"status": "deleted", "id": memory.id, "content": memory.content}

    search = Tool(
        name="search_memory",
        description=("Search the user's long-term memory (their past trips, preferences, goals, "
                     "personal facts) and general facts. Use it when the answer may depend on "
                     "something the user told you in an earlier conversation."),
        parameters={"type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "what to look for, in plain words"},
                        "memory_type": {"type": "string", "enum": ["any", "episodic", "semantic"],
                                        "description": "episodic: about the user; semantic: general facts"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 20,
                                  "description": "how many memories to return at most"}},
                    "required": ["query"], "additionalProperties": False},
        fn=search_memory)
    manage = Tool(
        name="manage_memory",
        description=("Add, update or delete a long-term memory. Add facts worth keeping across "
                     "conversations (written as 'User ...' for facts about the user); update or "
                     "delete a memory by the id search_memory returned when the user corrects it "
                     "(an update keeps the old text as history)."),
        parameters={"type": "object",
                    "properties": {
                        "action": {"type": "string", "enum": ["add", "update", "delete"]},
                        "content": {"type": "string", "description": "the memory text (add / update)"},
                        "memory_type": {"type": "string", "enum": ["episodic", "semantic"]},
                        "memory_id": {"type": "string", "description": "the id to update or delete"}},
                    "required": ["action"], "additionalProperties": False},
        fn=manage_memory)
    return [search, manage]


def tool_hits(store, user_id: str, tool_calls: list[dict], tool_results: list[str]) -> list[MemoryHit]:
    """The memories the model found through ``search_memory`` calls, in the order found."""
    found: dict[str, float] = {}
    for call, result in zip(tool_calls, tool_results):
        if call.get("function", {}).get("name") == "search_memory":
            for hit in json.loads(result).get("results", []):  # an error result has none
                found.setdefault(hit["id"], hit["distance"])
    return [MemoryHit(m, found[m.id]) for m in store.get_many(list(found), user_id) if m] if found else []
