"""Every byte that crosses to an MCP server: the ``ResourceSource`` protocol, the SDK-backed
client (:class:`~asyncai_watch.mcp.client.McpResourceSource`; :mod:`.connection` owns its SDK client,
:mod:`.convert` turns SDK results and errors into ours), its stdio transport
(:mod:`.stdio`, whose line framing the server kit's stdio shares: :mod:`asyncai_watch.jsonrpc_framing`) and ``--server``
specs. The public names are re-exported from :mod:`asyncai_watch`."""
