"""Prefill/decode disaggregation: the scheduler, the prefill and decode roles, KV transfer.

The wire contract is MindIE's (shared/reference/llm_pd.md §1.4-1.8): see wire.py.
"""
