// A server on the TypeScript MCP SDK v1 (@modelcontextprotocol/sdk 1.x), as most servers run
// today: it negotiates MCP 2025-11-25 (initialize) and advertises resources.subscribe, which
// it serves with resources/subscribe and notifications/resources/updated.
//
// One counter, peer://counter ({"count": N}, application/json), shared by every session; the
// tool `bump` adds one and tells every session subscribed to it. The tool `subscriptions`
// (read-only) says how many sessions are subscribed to each URI.
//
//   node ts_v1_server.cjs --modules DIR [--stdio] [--http HOST:PORT] [--ready-file PATH]
//
// --modules is the node_modules directory holding @modelcontextprotocol/sdk (fetched into
// .tools/ by scripts/fetch_conformance.py). --http serves Streamable HTTP (sessions, SSE) and
// prints `READY http://HOST:PORT/mcp` on stderr once listening; with --ready-file that line is
// also written to PATH (before stdio is served, so a stdio client that got its answer can read it).
// With --stdio and --http both, stdio and HTTP sessions share the counter.
"use strict";

const fs = require("node:fs");
const http = require("node:http");
const path = require("node:path");
const { randomUUID } = require("node:crypto");
const { createRequire } = require("node:module");

function parseArgs(argv) {
  const options = { stdio: false, http: null, readyFile: null, modules: null };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--stdio") options.stdio = true;
    else if (arg === "--http") options.http = argv[++i];
    else if (arg === "--ready-file") options.readyFile = argv[++i];
    else if (arg === "--modules") options.modules = argv[++i];
    else throw new Error(`unknown argument ${JSON.stringify(arg)}`);
  }
  if (!options.modules) throw new Error("--modules DIR (the node_modules holding @modelcontextprotocol/sdk) is required");
  if (!options.stdio && !options.http) throw new Error("say --stdio, --http HOST:PORT, or both");
  return options;
}

const options = parseArgs(process.argv.slice(2));
const sdk = createRequire(path.join(path.resolve(options.modules), "noop.js"));
const { McpServer } = sdk("@modelcontextprotocol/sdk/server/mcp.js");
const { StdioServerTransport } = sdk("@modelcontextprotocol/sdk/server/stdio.js");
const { StreamableHTTPServerTransport } = sdk("@modelcontextprotocol/sdk/server/streamableHttp.js");
const { SubscribeRequestSchema, UnsubscribeRequestSchema } = sdk("@modelcontextprotocol/sdk/types.js");

const URI = "peer://counter";
let count = 0;
const sessions = new Set(); // {server, subscribed: Set<uri>}

function counterBody() {
  return JSON.stringify({ count });
}

function createSession() {
  const server = new McpServer(
    { name: "ts-v1-peer", version: "1.0.0" },
    { capabilities: { resources: { subscribe: true, listChanged: false }, tools: {} } },
  );
  const session = { server, subscribed: new Set() };
  server.registerResource(
    "counter",
    URI,
    {
      mimeType: "application/json",
      description: 'A counter; the bump tool adds one.\nExample: await watch_start(name="counter", uri="peer://counter")',
    },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: "application/json", text: counterBody() }] }),
  );
  server.registerTool(
    "bump",
    {
      description: "Add one to peer://counter and notify its subscribers.",
      inputSchema: {},
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false },
    },
    async () => {
      count += 1;
      for (const other of sessions) {
        if (other.subscribed.has(URI)) await other.server.server.sendResourceUpdated({ uri: URI });
      }
      return { content: [{ type: "text", text: counterBody() }] };
    },
  );
  server.registerTool(
    "subscriptions",
    {
      description: "How many sessions are subscribed to each URI.",
      inputSchema: {},
      annotations: { readOnlyHint: true },
    },
    async () => {
      const counts = {};
      for (const other of sessions) for (const uri of other.subscribed) counts[uri] = (counts[uri] || 0) + 1;
      return { content: [{ type: "text", text: JSON.stringify(counts) }] };
    },
  );
  server.server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    session.subscribed.add(request.params.uri);
    return {};
  });
  server.server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    session.subscribed.delete(request.params.uri);
    return {};
  });
  sessions.add(session);
  server.server.onclose = () => sessions.delete(session);
  return session;
}

function serveHttp(hostPort) {
  const cut = hostPort.lastIndexOf(":");
  const host = hostPort.slice(0, cut).replace(/^\[|\]$/g, "");
  const port = Number(hostPort.slice(cut + 1));
  const transports = new Map(); // session id -> transport
  const httpServer = http.createServer(async (req, res) => {
    try {
      if (new URL(req.url, "http://x").pathname !== "/mcp") {
        res.writeHead(404).end();
        return;
      }
      const sessionId = req.headers["mcp-session-id"];
      let transport = sessionId ? transports.get(sessionId) : undefined;
      if (!transport && !sessionId && req.method === "POST") {
        const { server } = createSession();
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => transports.set(id, transport),
        });
        transport.onclose = () => {
          if (transport.sessionId) transports.delete(transport.sessionId);
        };
        await server.connect(transport);
      }
      if (!transport) {
        res.writeHead(404, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32001, message: "Session not found" } }));
        return;
      }
      await transport.handleRequest(req, res);
    } catch (error) {
      if (!res.headersSent) res.writeHead(500).end(String(error));
    }
  });
  return new Promise((resolve, reject) => {
    httpServer.once("error", reject);
    httpServer.listen(port, host, () => {
      const address = httpServer.address();
      const shown = address.family === "IPv6" ? `[${address.address}]` : address.address;
      resolve(`READY http://${shown}:${address.port}/mcp`);
    });
  });
}

async function main() {
  if (options.http) {
    const line = await serveHttp(options.http);
    if (options.readyFile) {
      fs.writeFileSync(options.readyFile + ".part", line + "\n");
      fs.renameSync(options.readyFile + ".part", options.readyFile);
    }
    process.stderr.write(line + "\n");
  }
  if (options.stdio) {
    const { server } = createSession();
    const transport = new StdioServerTransport();
    // The client closing stdin ends the server, whatever HTTP sessions are open.
    process.stdin.on("end", () => process.exit(0));
    await server.connect(transport);
  }
}

process.on("SIGTERM", () => process.exit(0));
main().catch((error) => {
  process.stderr.write(`ts_v1_server: ${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
