"""memorykit: agent memory with Redis, the support package of the course.

    import memorykit as mk
    r = mk.connect(); emb = mk.get_embedder(r); llm = mk.get_llm()
"""
import os as _os

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS"):
    _os.environ.setdefault(_var, "1")
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from .config import Settings, settings
from .embeddings import Embedder, get_embedder, model_path
from .errors import (LLMError, MemoryKitError, ModelNotFoundError, ModuleMissingError,
                     SchemaMismatchError, ServerError, ValidationError)
from .llm import OfflineChat, OpenAIChat, get_llm, offline_skill, parse_json, task_prompt, why_llm
from .messages import Message, count_tokens, set_token_counter
from .server import connect, redis_url

__version__ = "0.1.0"
from .long_term import Memory, MemoryHit, MemoryStore, content_hash, forget_user
from .tools import Tool, ToolError
