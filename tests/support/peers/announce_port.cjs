// Preloaded (`node --require announce_port.cjs SERVER.js ...`) into an HTTP server we run as it
// ships (server-everything), to learn its port without polling: with PORT=0 the server picks a
// free port but prints only "port 0". This binds the first listening socket to 127.0.0.1 (the
// server would take every interface) and prints `READY http://127.0.0.1:PORT/mcp` on stderr once
// it accepts connections. Nothing else of the server is touched.
"use strict";

const net = require("node:net");

const listen = net.Server.prototype.listen;
let announced = false;
net.Server.prototype.listen = function (...args) {
  if (!announced && (typeof args[0] === "number" || typeof args[0] === "string") && typeof args[1] !== "string") {
    announced = true;
    args.splice(1, 0, "127.0.0.1");
    this.once("listening", () => process.stderr.write(`READY http://127.0.0.1:${this.address().port}/mcp\n`));
  }
  return listen.apply(this, args);
};
