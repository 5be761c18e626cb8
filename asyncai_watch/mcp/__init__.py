"""Every byte that crosses to an MCP server: the ``ResourceSource`` protocol, the SDK-backed
client (:class:`~asyncai_watch.mcp.client.McpResourceSource`), its stdio transport
(:mod:`.stdio`, whose line framing the server kit's stdio shares: :mod:`asyncai_watch.jsonrpc_framing`) and ``--server``
specs. The public names are re-exported from :mod:`asyncai_watch`."""
