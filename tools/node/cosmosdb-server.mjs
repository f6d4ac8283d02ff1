// Starts @vercel/cosmosdb-server for tests on 127.0.0.1 and a port chosen by the OS.
//
// Usage: node cosmosdb-server.mjs [--https]
//
// Prints `listening PORT` on stdout once the server accepts connections, and exits
// when its stdin closes, so the server dies with the process that started it even
// when that process is killed.
import { createHttpServer, createHttpsServer } from "@vercel/cosmosdb-server";

const https = process.argv.includes("--https");
// keepAlive: the package's default answers `Connection: close` on every request.
const server = https
  ? createHttpsServer({ keepAlive: true })
  : createHttpServer({ keepAlive: true });

server.on("error", (err) => {
  console.error(`cosmosdb-server: ${err.message}`);
  process.exit(1);
});

server.listen(0, "127.0.0.1", () => {
  const { port } = server.address();
  process.stdout.write(`listening ${port}\n`);
});

process.stdin.on("end", () => process.exit(0));
process.stdin.on("error", () => process.exit(0));
process.stdin.resume();
