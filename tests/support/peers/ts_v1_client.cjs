// A client on the TypeScript MCP SDK v1 (@modelcontextprotocol/sdk 1.x), as most hosts run
// today: it negotiates MCP 2025-11-25 (initialize), subscribes to one resource with
// resources/subscribe, and prints one JSON line on stdout per thing that happens:
//
//   {"event": "connected", "server": NAME, "subscribe": BOOL}   the handshake is done
//   {"event": "subscribed", "uri": URI}                         resources/subscribe was answered
//   {"event": "updated", "uri": URI, "text": BODY}              a notifications/resources/updated,
//                                                               and the resource read right after it
//   {"event": "error", "message": TEXT}                         then it exits 1
//
//   node ts_v1_client.cjs --modules DIR --uri URI --http URL [--header 'NAME: VALUE' ...]
//   node ts_v1_client.cjs --modules DIR --uri URI --stdio COMMAND [ARGS...]
//
// --modules is the node_modules directory holding @modelcontextprotocol/sdk. It runs until its
// stdin closes or SIGTERM, then closes the connection (a stdio server it started exits).
"use strict";

const path = require("node:path");
const { createRequire } = require("node:module");

function parseArgs(argv) {
  const options = { modules: null, uri: null, http: null, stdio: null };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--modules") options.modules = argv[++i];
    else if (arg === "--uri") options.uri = argv[++i];
    else if (arg === "--http") options.http = argv[++i];
    else if (arg === "--header") (options.headers ||= {})[argv[i + 1].split(":")[0]] = argv[++i].split(":").slice(1).join(":").trim();
    else if (arg === "--stdio") {
      options.stdio = argv.slice(i + 1);
      break;
    } else throw new Error(`unknown argument ${JSON.stringify(arg)}`);
  }
  if (!options.modules || !options.uri) throw new Error("--modules DIR and --uri URI are required");
  if (!options.http === !(options.stdio && options.stdio.length)) throw new Error("say --http URL or --stdio COMMAND ...");
  return options;
}

function say(event) {
  process.stdout.write(JSON.stringify(event) + "\n");
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const sdk = createRequire(path.join(path.resolve(options.modules), "noop.js"));
  const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
  const { ResourceUpdatedNotificationSchema } = sdk("@modelcontextprotocol/sdk/types.js");
  let transport;
  if (options.http) {
    const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");
    transport = new StreamableHTTPClientTransport(new URL(options.http), { requestInit: { headers: options.headers || {} } });
  } else {
    const { StdioClientTransport } = sdk("@modelcontextprotocol/sdk/client/stdio.js");
    const [command, ...args] = options.stdio;
    transport = new StdioClientTransport({ command, args, env: { ...process.env }, stderr: "inherit" });
  }
  const client = new Client({ name: "ts-v1-client", version: "1.0.0" });
  // Updates are handled one at a time, in order: each is read before the next is looked at.
  let queue = Promise.resolve();
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (notification) => {
    const uri = notification.params.uri;
    queue = queue.then(async () => {
      const read = await client.readResource({ uri });
      const first = read.contents[0] || {};
      say({ event: "updated", uri, text: first.text ?? null });
    }).catch((error) => fail(error));
  });
  async function close() {
    try {
      await client.close();
    } finally {
      process.exit(0);
    }
  }
  process.on("SIGTERM", close);
  process.stdin.on("end", close);
  process.stdin.resume();
  await client.connect(transport);
  const capabilities = client.getServerCapabilities() || {};
  say({
    event: "connected",
    server: (client.getServerVersion() || {}).name ?? null,
    subscribe: Boolean(capabilities.resources && capabilities.resources.subscribe),
  });
  await client.subscribeResource({ uri: options.uri });
  say({ event: "subscribed", uri: options.uri });
}

function fail(error) {
  say({ event: "error", message: String(error && error.message ? error.message : error) });
  process.exit(1);
}

main().catch(fail);
