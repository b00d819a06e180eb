"""The seam between memory and model: typed tasks, one runner, the OpenAI-compatible client."""
from .factory import get_llm, why_llm
from .openai_chat import OpenAIChat
from .task import (ChatModel, Task, TaskFailed, Text, Usage, UsageMeter, is_placeholder, parse_json, run_task,
                   track_usage, usage_meter)

__all__ = ["ChatModel", "OpenAIChat", "Task", "TaskFailed", "Text", "Usage", "UsageMeter", "get_llm",
           "is_placeholder", "parse_json", "run_task", "track_usage", "usage_meter", "why_llm"]
