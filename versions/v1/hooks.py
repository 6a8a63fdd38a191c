"""Wiring hooks of the seed spec.

Restricted Python (checked by worker_agent/spec.py): imports only from re, json, math, unicodedata
and string; no dunder attributes, no file, network or process access.

- format_tool_result(tool_name, result) -> str: how a tool result (plain JSON data) is shown to
  the model.
- postprocess_query(sparql) -> str: cleans the final query (fences, prose).
"""

import json
import re

_MAX_ITEMS = 15
_MAX_CHARS = 4000
_FENCE = re.compile(r"```[ \t]*(?:sparql)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_DECLARATION = re.compile(r"\s*(PREFIX|BASE)\b", re.IGNORECASE)


def format_tool_result(tool_name, result):
    """One compact JSON line per item, so the model sees every candidate at low token cost."""
    if isinstance(result, str):
        text = result
    elif isinstance(result, list):
        if not result:
            return f"{tool_name}: no results"
        lines, size = [], 0
        for item in result[:_MAX_ITEMS]:
            line = json.dumps(item, ensure_ascii=False, sort_keys=True, default=str)
            if lines and size + len(line) > _MAX_CHARS:  # whole lines only: each stays valid JSON
                break
            lines.append(line)
            size += len(line) + 1
        if len(result) > len(lines):
            lines.append(f"... {len(result) - len(lines)} more not shown")
        text = "\n".join(lines)
    else:
        # compact: the tools already fit their data to the size limit (dropping rows, never cutting
        # JSON in half); an indented rendering would overflow it again
        text = json.dumps(result, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return text


def postprocess_query(sparql):
    """Strip the markdown fence, prose and trailing semicolon models often wrap a query in.

    PREFIX lines before the fence are kept: rule enforcement may have added them already.
    """
    match = _FENCE.search(sparql)
    if match:
        kept = [line.strip() for line in sparql[: match.start()].splitlines() if _DECLARATION.match(line)]
        sparql = "\n".join(kept + [match.group(1).strip()])
    return sparql.strip().rstrip(";").rstrip()
