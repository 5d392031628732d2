"""Deprecated: import the app's views from their tab modules (``ctxir.app.search_tab.search``, ...) and its state
from ``ctxir.app.state``. Kept only for ``scripts/benchmark_app.py``, which still imports the few names below."""

from __future__ import annotations

from ctxir.app.attention_tab import attention
from ctxir.app.search_tab import search
from ctxir.app.state import AppConfig, AppState, demo_queries

__all__ = ["AppConfig", "AppState", "attention", "demo_queries", "search"]
