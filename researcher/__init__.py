"""The researcher: evaluation, version store, ledger, proposers and the improvement loop."""
