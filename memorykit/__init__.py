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
from .short_term import ChatHistory, fix_boundaries, list_threads, trim_last, trim_to_tokens, valid_cuts
from .summarize import ByCount, ByTokens, summarize_if_needed, summarize_messages, summary_prompt
from .working import PROFILE_TEMPLATE, Observation, Version, WorkingMemory, profile_facts
from .recall import MessageIndex, MessageRecall, RecalledMessage, merge_recalled, recall_block
from .procedural import (Evaluation, FeedbackExample, FeedbackStore, Guidance, Procedure, ProcedureHit,
                         ProcedureStore, analyze_feedback, evaluate_workflow)
from .wellness import load_wellness, wellness_tools
from .tool_agent import ToolAgent, ToolRun
from .long_term import format_memories, owner_tag
from .extraction import CandidateMemory, extract_memories, parse_memories, rule_extract
from .tools import memory_tools
from .plots import plot_umap, umap_project
from .dedup import (Decision, Fact, Merge, as_fact, compare_facts, consolidate, decide, decision_prompt,
                    find_exact, find_similar, history, offline_decision, parse_decision, read_fact, remember,
                    semantic_verdict)
from .agent import MemoryAgent, Retry, Turn
from .widgets import ChatWidget
