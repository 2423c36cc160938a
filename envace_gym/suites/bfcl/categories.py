"""BFCL v4's categories by kind, in bfcl-eval's names: the one list the suites, the registered ids
(``EnvACE/bfcl-<category with dashes>-v0``) and the paper's benchmark read. Imports nothing, so that
registering the ids loads no BFCL code."""

MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
SINGLE_TURN = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
    "live_relevance",
)
LANGUAGES = ("simple_java", "simple_javascript")  # single-turn, in another language than Python
MEMORY = ("memory_kv", "memory_vector", "memory_rec_sum")
WEB_SEARCH = ("web_search_base", "web_search_no_snippet")
FORMAT_SENSITIVITY = "format_sensitivity"  # outside the leaderboard's overall
#: every category, in the order the ids are registered
ALL = (*MULTI_TURN, *SINGLE_TURN, *LANGUAGES, *MEMORY, *WEB_SEARCH, FORMAT_SENSITIVITY)


def env_id(category: str) -> str:
    """``multi_turn_base`` is ``EnvACE/bfcl-multi-turn-base-v0``."""
    return f"EnvACE/bfcl-{category.replace('_', '-')}-v0"
