#!/usr/bin/env bash
# One-command install: the project with its test extras, and the official TEXT2SPARQL client.
# The client pins `pytrec-eval`, which builds from a source download that fails offline; its module
# ships as wheels in `pytrec-eval-terrier` (a test extra), so the client goes in with --no-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -e ".[test]"
python -m pip install --no-deps "text2sparql-client==2.1.0"
