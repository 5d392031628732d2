"""The API as a developer meets it (issue #21 §3): ``view_api()`` names every input and output, the endpoint
table of docs/reference/endpoints.md is what ``view_api()`` says, and every endpoint is an MCP tool an MCP client can list and call."""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path

import pytest

from ctxir.app.api import ENDPOINTS

pytestmark = pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")

ENDPOINTS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "endpoints.md"
GRADIO_DEFAULT_NAME = re.compile(r"^(value|parameter)_\d+$")


@pytest.fixture(scope="module")
def served(app_state):
    """(url, view_api dict) of the app launched with its MCP server, as app.py launches it."""
    import app
    from tests.conftest import api_client, free_port

    pytest.importorskip("mcp")
    built = app.build_app(app_state)
    demo = built.demo
    port = free_port()
    demo.queue().launch(
        server_name="127.0.0.1",
        server_port=port,
        prevent_thread_lock=True,
        quiet=True,
        allowed_paths=[str(built.outputs.root)],
        mcp_server=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        client = api_client(url, download_files=False)
        yield url, client.view_api(print_info=False, return_format="dict")
        client.close()
    finally:
        demo.close()


def api_table(info: dict) -> str:
    """The endpoint table as ``view_api()`` describes the app: endpoint, argument names, output names."""
    rows = ["| Endpoint | Arguments | Outputs |", "|---|---|---|"]
    for name, endpoint in info["named_endpoints"].items():
        args = ", ".join(f"`{p['parameter_name']}`" for p in endpoint["parameters"])
        outputs = ", ".join(f"`{r['label']}`" for r in endpoint["returns"])
        rows.append(f"| `{name}` | {args} | {outputs} |")
    return "\n".join(rows)


def test_a_web_pages_request_is_told_from_an_api_clients():
    from types import SimpleNamespace

    from ctxir.app.ui import from_browser

    pages = [{"x-gradio-user": "app"}, {"Sec-Fetch-Mode": "cors"}]
    clients = [{"x-gradio-user": "api", "sec-fetch-mode": "cors"}, {}]
    assert all(from_browser(SimpleNamespace(headers=h)) for h in pages) and from_browser(None)
    assert not any(from_browser(SimpleNamespace(headers=h)) for h in clients)


def test_every_input_and_output_has_a_meaningful_name(served):
    _, info = served
    endpoints = info["named_endpoints"]
    assert set(endpoints) == {
        f"/{name}" for name in ENDPOINTS
    }  # each public endpoint is documented, no other
    for name, endpoint in endpoints.items():
        params = [p["parameter_name"] for p in endpoint["parameters"]]
        outputs = [r["label"] for r in endpoint["returns"]]
        assert not [p for p in params + outputs if GRADIO_DEFAULT_NAME.match(p)], (name, params, outputs)
        assert params == list(ENDPOINTS[name[1:]].args), name  # every argument described, in the order sent
        assert len(set(outputs)) == len(outputs), (name, outputs)  # a client can tell the outputs apart
    search = endpoints["/search"]
    assert [r["label"] for r in search["returns"]][1:] == ["summary", "numbers"]
    assert [p["parameter_name"] for p in search["parameters"]][:3] == ["query", "corpus", "first_stage"]


def test_the_endpoint_table_matches_view_api(served):
    _, info = served
    text = ENDPOINTS_PAGE.read_text(encoding="utf-8")
    begin, end = (
        "<!-- api-table: tests/test_app_api.py checks it against view_api() -->",
        "<!-- /api-table -->",
    )
    assert begin in text and end in text, "docs/reference/endpoints.md lost its API table markers"
    table = text.split(begin, 1)[1].split(end, 1)[0].strip()
    expected = api_table(info)
    assert table == expected, (
        f"docs/reference/endpoints.md's table differs from view_api(); it should read:\n{expected}"
    )


def mcp_session(url: str, work):
    """Run ``work(session)`` in an MCP client session over streamable HTTP to the app's MCP server."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def main():
        async with (
            streamablehttp_client(f"{url}gradio_api/mcp/") as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await work(session)

    return asyncio.run(main())


def test_every_endpoint_is_an_mcp_tool_with_described_arguments(served):
    url, _ = served

    async def tools(session):
        return (await session.list_tools()).tools

    listed = {tool.name: tool for tool in mcp_session(url, tools)}
    assert set(ENDPOINTS) <= set(listed)
    search = listed["search"]
    assert search.description.startswith("Search a corpus: a first stage finds candidates")
    properties = search.inputSchema["properties"]
    assert list(properties)[:6] == ["query", "corpus", "first_stage", "reranker", "k", "depth"]
    assert properties["first_stage"]["description"].startswith("bm25 (word matches)")


def test_an_mcp_client_calls_search(served):
    url, _ = served

    async def call(session):
        return await session.call_tool(
            "search",
            {
                "query": "otters playing on the river bank",
                "corpus": "demo-subset",
                "first_stage": "bm25",
                "reranker": "none",
                "k": 3,
                "depth": 20,
            },
        )

    result = mcp_session(url, call)
    assert not result.isError, result
    (text,) = [item.text for item in result.content if getattr(item, "type", "") == "text"]
    table, summary, numbers = ast.literal_eval(
        text
    )  # Gradio's MCP server returns the outputs as one Python list
    assert numbers["first_stage"] == "bm25" and len(numbers["hits"]) == 3 and len(table["data"]) == 3
    assert numbers["hits"][0]["doc_id"] == "animals-01" and "3 results" in summary


def test_an_mcp_client_gets_errors_as_plain_text(served):
    url, _ = served

    async def call(session):
        return [
            await session.call_tool(
                "search",
                {
                    "query": query,
                    "corpus": "demo-subset",
                    "first_stage": "bm25",
                    "reranker": "none",
                    "k": k,
                    "depth": 20,
                },
            )
            for query, k in (("\x00\x00", 3), ("<b>otters</b> & co " + "x" * 5000, 3))
        ]

    empty, long = mcp_session(url, call)
    texts = [" ".join(getattr(item, "text", "") for item in r.content) for r in (empty, long)]
    assert empty.isError and "query is empty" in texts[0], texts[0]
    # the message quotes the query's start as typed, not '&lt;b&gt;otters&lt;/b&gt; &amp; co'
    assert long.isError and "(it begins '<b>otters</b> & co x" in texts[1], texts[1]
